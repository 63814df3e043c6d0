//! Reading a reply's JSON, shared by the wire shapes: typed member access whose failures name
//! the member in Herma's own words ([`Shape`]), and the events of a completed reply in their
//! documented order ([`Events`]).

use serde_json::{Map, Value};

use super::Reply;
use crate::call::{ModelEvent, StopReason, Usage};

/// A reply member that is missing or has the wrong type; the words are Herma's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) member: &'static str,
    pub(super) expected: &'static str,
}

pub(super) type Read<T> = Result<T, Shape>;

pub(super) fn shape(member: &'static str, expected: &'static str) -> Shape {
    Shape { member, expected }
}

pub(super) type Object = Map<String, Value>;

pub(super) fn object<'a>(value: &'a Value, member: &'static str) -> Read<&'a Object> {
    value.as_object().ok_or(shape(member, "an object"))
}

/// A member's value; `null` counts as absent.
pub(super) fn member<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(super) fn required<'a>(obj: &'a Object, key: &'static str) -> Read<&'a Value> {
    member(obj, key).ok_or(shape(key, "present"))
}

pub(super) fn opt_str<'a>(obj: &'a Object, key: &'static str) -> Read<Option<&'a str>> {
    member(obj, key)
        .map(|v| v.as_str().ok_or(shape(key, "a string")))
        .transpose()
}

pub(super) fn req_str<'a>(obj: &'a Object, key: &'static str) -> Read<&'a str> {
    opt_str(obj, key)?.ok_or(shape(key, "a string"))
}

pub(super) fn opt_object<'a>(obj: &'a Object, key: &'static str) -> Read<Option<&'a Object>> {
    member(obj, key).map(|v| object(v, key)).transpose()
}

pub(super) fn req_object<'a>(obj: &'a Object, key: &'static str) -> Read<&'a Object> {
    object(required(obj, key)?, key)
}

/// An array member; absent is empty.
pub(super) fn opt_array<'a>(obj: &'a Object, key: &'static str) -> Read<&'a [Value]> {
    match member(obj, key) {
        None => Ok(&[]),
        Some(v) => v
            .as_array()
            .map(Vec::as_slice)
            .ok_or(shape(key, "an array")),
    }
}

pub(super) fn req_array<'a>(obj: &'a Object, key: &'static str) -> Read<&'a [Value]> {
    required(obj, key)?;
    opt_array(obj, key)
}

pub(super) fn opt_u64(obj: &Object, key: &'static str) -> Read<Option<u64>> {
    member(obj, key)
        .map(|v| v.as_u64().ok_or(shape(key, "a whole number")))
        .transpose()
}

pub(super) fn req_u64(obj: &Object, key: &'static str) -> Read<u64> {
    opt_u64(obj, key)?.ok_or(shape(key, "a whole number"))
}

/// The events of a completed reply, pushed in the documented order by each wire shape.
#[derive(Default)]
pub(super) struct Events {
    pub(super) reference: Option<String>,
    pub(super) text: String,
    calls: Vec<ModelEvent>,
}

impl Events {
    pub(super) fn call(&mut self, id: &str, name: &str, arguments: String) {
        self.calls.push(ModelEvent::ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments,
        });
    }

    pub(super) fn has_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The completed reply: `Reference`, `TextDelta`, `ToolCall`s, `Stop`, `Usage`.
    pub(super) fn finish(
        self,
        stop: StopReason,
        usage: Option<Usage>,
        reported_model: Option<&str>,
        reported_provider: Option<&str>,
    ) -> Reply {
        let mut events = Vec::with_capacity(self.calls.len() + 4);
        events.extend(self.reference.map(ModelEvent::Reference));
        if !self.text.is_empty() {
            events.push(ModelEvent::TextDelta(self.text));
        }
        events.extend(self.calls);
        events.push(ModelEvent::Stop(stop));
        events.extend(usage.map(ModelEvent::Usage));
        Reply::Completed {
            events,
            reported_model: reported_model.map(str::to_owned),
            reported_provider: reported_provider.map(str::to_owned),
        }
    }
}

/// The stop of a reply that did not say why it stopped.
pub(super) fn unspecified_stop() -> StopReason {
    StopReason::Other("unspecified".to_owned())
}
