//! The shape of a declaration: a [`Setting`] (or a [`Family`] of settings, one per
//! [`Member`]) pairs a name and a doc line with a [`Kind`], which says how a value parses, what
//! applies when it is unset, and how docs and `herma config check` show it.

/// Why a set value was refused: one detail per problem (a list can have several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub Vec<String>);

impl From<String> for Invalid {
    fn from(detail: String) -> Self {
        Self(vec![detail])
    }
}

/// What docs and `herma config check` say about a kind, whatever the type it parses into.
pub trait Describe {
    /// The default as shown; `None` when the setting is unset by default.
    fn shown_default(&self) -> Option<String>;
    /// The values accepted, in Markdown (`` `1024` to `65536` ``, `` `text` or `json` ``).
    fn accepts(&self) -> String;
    /// A set value as `herma config check` shows it; secrets override this to hide it.
    fn show(&self, raw: &str) -> String {
        raw.to_owned()
    }
}

/// How a setting parses.
pub trait Kind: Describe {
    type Value;
    /// The value when the setting is unset (also what an invalid value is replaced by while the
    /// other settings are still read).
    fn default_value(&self) -> Self::Value;
    /// Parses a set value: trimmed, never empty.
    fn parse(&self, raw: &str) -> Result<Self::Value, Invalid>;
}

/// One setting.
#[derive(Clone, Copy, Debug)]
pub struct Setting<K> {
    pub name: &'static str,
    pub kind: K,
    pub doc: &'static str,
}

/// One setting per member, declared once: `HERMA_<TIER>_URL` is `HERMA_EMBED_URL` and
/// `HERMA_MICROMODEL_URL`. Every member shares the kind (so the default and bounds).
#[derive(Clone, Copy, Debug)]
pub struct Family<K> {
    /// The name before the member's key (`HERMA_`).
    pub prefix: &'static str,
    /// The name after it (`_URL`).
    pub suffix: &'static str,
    pub members: &'static Members,
    pub kind: K,
    pub doc: &'static str,
}

/// The members a family is declared for, and the placeholder its template shows them by.
#[derive(Debug)]
pub struct Members {
    /// `TIER` in `HERMA_<TIER>_URL`.
    pub placeholder: &'static str,
    pub members: &'static [Member],
}

/// One member of a family: its key in the names, and what it stands for.
#[derive(Debug)]
pub struct Member {
    pub key: &'static str,
    pub doc: &'static str,
}

impl<K> Family<K> {
    /// The member's setting name.
    pub fn name(&self, member: &Member) -> String {
        format!("{}{}{}", self.prefix, member.key, self.suffix)
    }
}

/// A setting or a family, as docs and `herma config check` see it.
pub trait Declared {
    /// The name, or a family's template (`HERMA_<TIER>_URL`).
    fn title(&self) -> String;
    /// Every concrete name: the setting's, or one per member.
    fn names(&self) -> Vec<String>;
    fn doc(&self) -> &'static str;
    fn describe(&self) -> &dyn Describe;
    /// A family's members.
    fn members(&self) -> Option<&'static Members>;
}

impl<K: Describe> Declared for Setting<K> {
    fn title(&self) -> String {
        self.name.to_owned()
    }

    fn names(&self) -> Vec<String> {
        vec![self.name.to_owned()]
    }

    fn doc(&self) -> &'static str {
        self.doc
    }

    fn describe(&self) -> &dyn Describe {
        &self.kind
    }

    fn members(&self) -> Option<&'static Members> {
        None
    }
}

impl<K: Describe> Declared for Family<K> {
    fn title(&self) -> String {
        format!(
            "{}<{}>{}",
            self.prefix, self.members.placeholder, self.suffix
        )
    }

    fn names(&self) -> Vec<String> {
        self.members.members.iter().map(|m| self.name(m)).collect()
    }

    fn doc(&self) -> &'static str {
        self.doc
    }

    fn describe(&self) -> &dyn Describe {
        &self.kind
    }

    fn members(&self) -> Option<&'static Members> {
        Some(self.members)
    }
}

/// A section of the table: settings that belong together, documented together.
pub struct Group {
    pub title: &'static str,
    pub doc: &'static str,
    pub settings: &'static [&'static dyn Declared],
}
