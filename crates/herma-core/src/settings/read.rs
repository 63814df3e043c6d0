//! [`Reader`]: reads settings from a map through their declarations, collecting every error.

use std::collections::BTreeMap;

use super::declare::{Family, Invalid, Kind, Member, Setting};

/// An invalid setting, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingError {
    pub name: String,
    pub detail: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.detail)
    }
}

/// The value of `name`, or `None` when unset, empty or whitespace-only.
pub fn setting<'a>(map: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    map.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// Reads declared settings from one map; errors are kept in the order the settings are read.
pub(super) struct Reader<'a> {
    map: &'a BTreeMap<String, String>,
    errors: Vec<SettingError>,
    /// Every name read, so a test can hold the reads to the table.
    names: Vec<String>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(map: &'a BTreeMap<String, String>) -> Self {
        Self {
            map,
            errors: Vec::new(),
            names: Vec::new(),
        }
    }

    pub(super) fn get<K: Kind>(&mut self, setting: &Setting<K>) -> K::Value {
        self.read(setting.name, &setting.kind)
    }

    pub(super) fn member<K: Kind>(&mut self, family: &Family<K>, member: &Member) -> K::Value {
        self.read(&family.name(member), &family.kind)
    }

    /// The set values of `declared`'s names, unparsed (read later, where they are used).
    pub(super) fn keep<'d>(
        &mut self,
        declared: impl Iterator<Item = &'d dyn super::declare::Declared>,
    ) -> BTreeMap<String, String> {
        let mut kept = BTreeMap::new();
        for name in declared.flat_map(|d| d.names()) {
            if let Some(value) = setting(self.map, &name) {
                kept.insert(name.clone(), value.to_owned());
            }
            self.names.push(name);
        }
        kept
    }

    /// Records an error found across settings (a missing companion, a conflict).
    pub(super) fn fail(&mut self, name: &str, detail: String) {
        self.errors.push(SettingError {
            name: name.to_owned(),
            detail,
        });
    }

    /// `value`, unless a setting was invalid.
    pub(super) fn finish<T>(self, value: T) -> Result<T, Vec<SettingError>> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(self.errors)
        }
    }

    #[cfg(test)]
    pub(super) fn names(&self) -> &[String] {
        &self.names
    }

    fn read<K: Kind>(&mut self, name: &str, kind: &K) -> K::Value {
        self.names.push(name.to_owned());
        let Some(raw) = setting(self.map, name) else {
            return kind.default_value();
        };
        kind.parse(raw).unwrap_or_else(|Invalid(details)| {
            for detail in details {
                self.fail(name, detail);
            }
            kind.default_value()
        })
    }
}
