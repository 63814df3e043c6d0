//! The checked form of a portable-profile schema: what `profile` builds and `arguments` reads.

use serde_json::{Number, Value};

use super::number::Decimal;

/// A JSON type as the profile names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JsonType {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
    Null,
}

pub(super) const ALL_TYPES: &[JsonType] = &[
    JsonType::Object,
    JsonType::Array,
    JsonType::String,
    JsonType::Integer,
    JsonType::Number,
    JsonType::Boolean,
    JsonType::Null,
];

impl JsonType {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            JsonType::Object => "object",
            JsonType::Array => "array",
            JsonType::String => "string",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::Boolean => "boolean",
            JsonType::Null => "null",
        }
    }

    /// The type with its article, for details: "an integer", "null".
    pub(super) fn spoken(self) -> &'static str {
        match self {
            JsonType::Object => "an object",
            JsonType::Array => "an array",
            JsonType::String => "a string",
            JsonType::Integer => "an integer",
            JsonType::Number => "a number",
            JsonType::Boolean => "a boolean",
            JsonType::Null => "null",
        }
    }

    pub(super) fn parse(name: &str) -> Option<Self> {
        ALL_TYPES.iter().copied().find(|t| t.as_str() == name)
    }

    /// Whether `value` is of this type. An integer is a JSON number written without a fraction
    /// or an exponent (`5`, not `5.0` or `5e0`), so it reads into any integer type unchanged.
    pub(super) fn holds(self, value: &Value) -> bool {
        match self {
            JsonType::Object => value.is_object(),
            JsonType::Array => value.is_array(),
            JsonType::String => value.is_string(),
            JsonType::Integer => value.is_i64() || value.is_u64(),
            JsonType::Number => value.is_number(),
            JsonType::Boolean => value.is_boolean(),
            JsonType::Null => value.is_null(),
        }
    }
}

/// A schema node that satisfies the profile.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Schema {
    Typed(Box<Typed>),
    AnyOf(Vec<Schema>),
    OneOf(Vec<Schema>),
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Typed {
    pub(super) shape: Shape,
    pub(super) choices: Option<Choices>,
}

/// The values `enum` or `const` allow.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Choices {
    pub(super) values: Vec<Value>,
    pub(super) is_const: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Shape {
    Object {
        properties: Vec<(String, Schema)>,
        required: Vec<String>,
    },
    Array {
        items: Box<Schema>,
        min_items: Option<u64>,
        max_items: Option<u64>,
        unique_items: bool,
    },
    String {
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    Integer(Bounds),
    Number(Bounds),
    Boolean,
    Null,
}

impl Shape {
    pub(super) fn json_type(&self) -> JsonType {
        match self {
            Shape::Object { .. } => JsonType::Object,
            Shape::Array { .. } => JsonType::Array,
            Shape::String { .. } => JsonType::String,
            Shape::Integer(_) => JsonType::Integer,
            Shape::Number(_) => JsonType::Number,
            Shape::Boolean => JsonType::Boolean,
            Shape::Null => JsonType::Null,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub(super) struct Bounds {
    pub(super) minimum: Option<Limit>,
    pub(super) maximum: Option<Limit>,
    pub(super) exclusive_minimum: Option<Limit>,
    pub(super) exclusive_maximum: Option<Limit>,
    pub(super) multiple_of: Option<Limit>,
}

/// A numeric bound: as written (for details) and exactly (for comparison).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Limit {
    pub(super) shown: Number,
    pub(super) exact: Decimal,
}
