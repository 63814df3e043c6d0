//! The portable profile: the JSON Schema subset that every provider's tool format and our own
//! argument check read the same way. This module checks a schema against it and builds the
//! checked form (`schema`).
//!
//! A node is either **typed** or a **combinator**. A typed node has `type` (one name: `object`,
//! `array`, `string`, `integer`, `number`, `boolean`, `null`; a list of types is refused, use
//! `anyOf`) and only the keywords of that type:
//!
//! | type | keywords |
//! | --- | --- |
//! | `object` | `properties` and `additionalProperties: false` (both required), `required` |
//! | `array` | `items` (one schema, required), `minItems`, `maxItems`, `uniqueItems` |
//! | `string` | `minLength`, `maxLength`, `enum`, `const` |
//! | `integer`, `number` | `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `enum`, `const` |
//! | `boolean`, `null` | `enum`, `const` |
//!
//! A combinator node holds exactly one of `anyOf`/`oneOf` (1 to 8 full schemas) and no `type`
//! or other structural keyword. Any node may carry `title` and `description` (strings). Refused:
//! references (`$ref`, `$defs`, …), regular expressions (`pattern`, `patternProperties`),
//! `format` (providers and validators disagree on it) and every other keyword.
//!
//! Values: `enum` is a non-empty array of distinct values and `const` one value (not both), each
//! of the node's own type; `required` lists distinct names of `properties`; lengths and item
//! counts are non-negative integers; numeric bounds are numbers, `multipleOf` above zero; a
//! minimum above its maximum is refused. Property counts (`minProperties`…) are not in the
//! profile: the seed names length, item and numeric bounds only.

use serde_json::{Map, Value};

use super::number::{Decimal, canonical};
use super::schema::{ALL_TYPES, Bounds, Choices, JsonType, Limit, Schema, Shape, Typed};
use super::{
    MAX_ALTERNATIVES, MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, Report, child,
};

const PRIMITIVES: &[JsonType] = &[
    JsonType::String,
    JsonType::Integer,
    JsonType::Number,
    JsonType::Boolean,
    JsonType::Null,
];

/// What a keyword is to the profile.
enum Keyword {
    Annotation,
    Type,
    Combinator,
    For(&'static [JsonType]),
    Refused(&'static str),
    Unknown,
}

fn classify(key: &str) -> Keyword {
    use JsonType as T;
    match key {
        "title" | "description" => Keyword::Annotation,
        "type" => Keyword::Type,
        "anyOf" | "oneOf" => Keyword::Combinator,
        "properties" | "additionalProperties" | "required" => Keyword::For(&[T::Object]),
        "items" | "minItems" | "maxItems" | "uniqueItems" => Keyword::For(&[T::Array]),
        "minLength" | "maxLength" => Keyword::For(&[T::String]),
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
            Keyword::For(&[T::Integer, T::Number])
        }
        "enum" | "const" => Keyword::For(PRIMITIVES),
        "$ref" | "$defs" | "definitions" | "$id" | "$anchor" | "$dynamicRef" | "$dynamicAnchor"
        | "$recursiveRef" | "$recursiveAnchor" => {
            Keyword::Refused("references are not part of the portable profile")
        }
        "pattern" | "patternProperties" => {
            Keyword::Refused("regular expressions are not part of the portable profile")
        }
        "format" => Keyword::Refused(
            "formats are not part of the portable profile: providers and validators read them differently",
        ),
        _ => Keyword::Unknown,
    }
}

/// Checks a contract's `input_schema` (found at `at`): the profile, the limits, and a typed
/// `object` root, since every provider takes a tool's parameters as one object.
pub(super) fn check_parameters(value: &Value, at: &str, report: &mut Report) -> Option<Schema> {
    let before = report.found();
    let bytes = value.to_string().len();
    if bytes > MAX_SCHEMA_BYTES {
        report.push(
            at,
            format!("must be at most {MAX_SCHEMA_BYTES} bytes as compact JSON, not {bytes}"),
        );
    }
    check_root_is_object(value, at, report);
    let schema = Walk { report, nodes: 0 }.node(value, at, 1);
    schema.filter(|_| report.found() == before)
}

fn check_root_is_object(value: &Value, at: &str, report: &mut Report) {
    let Some(members) = value.as_object() else {
        return; // the walk refuses it
    };
    match members.get("type").and_then(Value::as_str) {
        Some(name) if name != "object" && JsonType::parse(name).is_some() => report.push(
            child(at, "type"),
            "must be \"object\": a tool's parameters are one object",
        ),
        None if members.contains_key("anyOf") || members.contains_key("oneOf") => report.push(
            at,
            "must be an object schema, not anyOf or oneOf: a tool's parameters are one object",
        ),
        _ => {}
    }
}

/// One pass over a schema, counting nodes.
struct Walk<'r> {
    report: &'r mut Report,
    nodes: usize,
}

impl Walk<'_> {
    /// Checks the node at `at`, `depth` levels deep (the root is 1).
    fn node(&mut self, value: &Value, at: &str, depth: usize) -> Option<Schema> {
        self.nodes += 1;
        if self.nodes == MAX_SCHEMA_NODES + 1 {
            self.push(
                at,
                format!("is one node too many: a schema has at most {MAX_SCHEMA_NODES} nodes"),
            );
        }
        if depth > MAX_SCHEMA_DEPTH {
            self.push(
                at,
                format!("is nested too deep: a schema has at most {MAX_SCHEMA_DEPTH} levels"),
            );
            return None;
        }
        let Some(members) = value.as_object() else {
            self.push(at, "must be a schema object");
            return None;
        };
        let before = self.report.found();
        self.refuse_keywords(members, at);
        self.check_annotations(members, at);
        let schema = if members.contains_key("anyOf") || members.contains_key("oneOf") {
            self.combinator(members, at, depth)
        } else {
            self.typed(members, at, depth)
                .map(|typed| Schema::Typed(Box::new(typed)))
        };
        schema.filter(|_| self.report.found() == before)
    }

    fn push(&mut self, pointer: impl Into<String>, detail: impl Into<String>) {
        self.report.push(pointer, detail);
    }

    fn refuse_keywords(&mut self, members: &Map<String, Value>, at: &str) {
        for key in members.keys() {
            match classify(key) {
                Keyword::Refused(why) => self.push(child(at, key), why),
                Keyword::Unknown => self.push(child(at, key), "unknown keyword"),
                Keyword::Annotation | Keyword::Type | Keyword::Combinator | Keyword::For(_) => {}
            }
        }
    }

    fn check_annotations(&mut self, members: &Map<String, Value>, at: &str) {
        for key in ["title", "description"] {
            if members.get(key).is_some_and(|v| !v.is_string()) {
                self.push(child(at, key), "must be a string");
            }
        }
    }

    fn combinator(
        &mut self,
        members: &Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Option<Schema> {
        let name = if members.contains_key("anyOf") {
            "anyOf"
        } else {
            "oneOf"
        };
        for key in members.keys() {
            match classify(key) {
                Keyword::Annotation | Keyword::Refused(_) | Keyword::Unknown => {}
                Keyword::Combinator if key == name => {}
                Keyword::Combinator => {
                    self.push(child(at, key), format!("cannot be combined with {name}"));
                }
                Keyword::Type | Keyword::For(_) => {
                    self.push(child(at, key), format!("is not allowed beside {name}"));
                }
            }
        }
        let list_at = child(at, name);
        let alternatives = match members.get(name).and_then(Value::as_array) {
            Some(list) if !list.is_empty() => list,
            _ => {
                self.push(list_at, "must be a non-empty array of schemas");
                return None;
            }
        };
        if alternatives.len() > MAX_ALTERNATIVES {
            self.push(
                list_at.as_str(),
                format!("must have at most {MAX_ALTERNATIVES} alternatives"),
            );
        }
        // Check every alternative before giving up on any.
        let checked: Vec<Option<Schema>> = alternatives
            .iter()
            .enumerate()
            .map(|(i, alt)| self.node(alt, &format!("{list_at}/{i}"), depth + 1))
            .collect();
        let checked: Vec<Schema> = checked.into_iter().collect::<Option<_>>()?;
        Some(if name == "anyOf" {
            Schema::AnyOf(checked)
        } else {
            Schema::OneOf(checked)
        })
    }

    fn typed(&mut self, members: &Map<String, Value>, at: &str, depth: usize) -> Option<Typed> {
        let ty = self.node_type(members, at)?;
        for key in members.keys() {
            if let Keyword::For(types) = classify(key)
                && !types.contains(&ty)
            {
                self.push(
                    child(at, key),
                    format!("applies only to {} nodes", spoken_list(types)),
                );
            }
        }
        let choices = self.choices(members, at, ty);
        let shape = match ty {
            JsonType::Object => self.object(members, at, depth),
            JsonType::Array => self.array(members, at, depth),
            JsonType::String => Some(self.string(members, at)),
            JsonType::Integer => Some(Shape::Integer(self.bounds(members, at))),
            JsonType::Number => Some(Shape::Number(self.bounds(members, at))),
            JsonType::Boolean => Some(Shape::Boolean),
            JsonType::Null => Some(Shape::Null),
        }?;
        Some(Typed { shape, choices })
    }

    fn node_type(&mut self, members: &Map<String, Value>, at: &str) -> Option<JsonType> {
        let type_at = child(at, "type");
        let names = || {
            let names: Vec<&str> = ALL_TYPES.iter().map(|t| t.as_str()).collect();
            names.join(", ")
        };
        match members.get("type") {
            None => self.push(type_at, "is required"),
            Some(Value::String(name)) => match JsonType::parse(name) {
                Some(ty) => return Some(ty),
                None => self.push(type_at, format!("must be one of {}", names())),
            },
            Some(_) => self.push(
                type_at,
                format!(
                    "must be one type name ({}); use anyOf for alternatives",
                    names()
                ),
            ),
        }
        None
    }

    fn object(&mut self, members: &Map<String, Value>, at: &str, depth: usize) -> Option<Shape> {
        let properties_at = child(at, "properties");
        let declared = members.get("properties").and_then(Value::as_object);
        let properties = match (members.get("properties"), declared) {
            (None, _) => {
                self.push(properties_at, "is required");
                None
            }
            (Some(_), None) => {
                self.push(properties_at, "must be an object of property schemas");
                None
            }
            (Some(_), Some(declared)) => {
                let checked: Vec<Option<(String, Schema)>> = declared
                    .iter()
                    .map(|(name, schema)| {
                        let schema = self.node(schema, &child(&properties_at, name), depth + 1);
                        schema.map(|s| (name.clone(), s))
                    })
                    .collect();
                checked.into_iter().collect::<Option<Vec<_>>>()
            }
        };
        match members.get("additionalProperties") {
            None => self.push(child(at, "additionalProperties"), "is required"),
            Some(Value::Bool(false)) => {}
            Some(_) => self.push(child(at, "additionalProperties"), "must be false"),
        }
        let required = self.required(members, at, declared);
        Some(Shape::Object {
            properties: properties?,
            required,
        })
    }

    fn required(
        &mut self,
        members: &Map<String, Value>,
        at: &str,
        declared: Option<&Map<String, Value>>,
    ) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let Some(value) = members.get("required") else {
            return names;
        };
        let required_at = child(at, "required");
        let Some(list) = value.as_array() else {
            self.push(required_at, "must be an array of property names");
            return names;
        };
        for (i, entry) in list.iter().enumerate() {
            let entry_at = format!("{required_at}/{i}");
            match entry.as_str() {
                None => self.push(entry_at, "must be a property name"),
                Some(name) if names.iter().any(|n| n == name) => {
                    self.push(entry_at, "duplicate entry");
                }
                Some(name) if declared.is_some_and(|d| !d.contains_key(name)) => {
                    self.push(entry_at, "is not a property of this object");
                }
                Some(name) => names.push(name.to_owned()),
            }
        }
        names
    }

    fn array(&mut self, members: &Map<String, Value>, at: &str, depth: usize) -> Option<Shape> {
        let items_at = child(at, "items");
        let items = match members.get("items") {
            None => {
                self.push(items_at, "is required");
                None
            }
            Some(items) => self.node(items, &items_at, depth + 1),
        };
        let min_items = self.count(members, at, "minItems");
        let max_items = self.count(members, at, "maxItems");
        self.check_order(min_items, max_items, at, "minItems", "maxItems");
        let unique_items = match members.get("uniqueItems") {
            None => false,
            Some(Value::Bool(unique)) => *unique,
            Some(_) => {
                self.push(child(at, "uniqueItems"), "must be a boolean");
                false
            }
        };
        Some(Shape::Array {
            items: Box::new(items?),
            min_items,
            max_items,
            unique_items,
        })
    }

    fn string(&mut self, members: &Map<String, Value>, at: &str) -> Shape {
        let min_length = self.count(members, at, "minLength");
        let max_length = self.count(members, at, "maxLength");
        self.check_order(min_length, max_length, at, "minLength", "maxLength");
        Shape::String {
            min_length,
            max_length,
        }
    }

    fn bounds(&mut self, members: &Map<String, Value>, at: &str) -> Bounds {
        let bounds = Bounds {
            minimum: self.limit(members, at, "minimum"),
            maximum: self.limit(members, at, "maximum"),
            exclusive_minimum: self.limit(members, at, "exclusiveMinimum"),
            exclusive_maximum: self.limit(members, at, "exclusiveMaximum"),
            multiple_of: self.limit(members, at, "multipleOf"),
        };
        if let Some(step) = &bounds.multiple_of
            && !step.exact.is_positive()
        {
            self.push(child(at, "multipleOf"), "must be greater than 0");
        }
        if let (Some(min), Some(max)) = (&bounds.minimum, &bounds.maximum)
            && min.exact > max.exact
        {
            self.push(child(at, "maximum"), "must not be less than minimum");
        }
        bounds
    }

    /// A length or item count: a non-negative integer.
    fn count(&mut self, members: &Map<String, Value>, at: &str, key: &str) -> Option<u64> {
        let value = members.get(key)?;
        let count = value.as_u64();
        if count.is_none() {
            self.push(child(at, key), "must be a non-negative integer");
        }
        count
    }

    fn check_order(&mut self, min: Option<u64>, max: Option<u64>, at: &str, lo: &str, hi: &str) {
        if let (Some(min), Some(max)) = (min, max)
            && min > max
        {
            self.push(child(at, hi), format!("must not be less than {lo}"));
        }
    }

    fn limit(&mut self, members: &Map<String, Value>, at: &str, key: &str) -> Option<Limit> {
        match members.get(key)? {
            Value::Number(n) => Some(Limit {
                shown: n.clone(),
                exact: Decimal::of(n),
            }),
            _ => {
                self.push(child(at, key), "must be a number");
                None
            }
        }
    }

    /// `enum` or `const` of a primitive node (on other nodes they were refused as misplaced).
    fn choices(&mut self, members: &Map<String, Value>, at: &str, ty: JsonType) -> Option<Choices> {
        if !PRIMITIVES.contains(&ty) {
            return None;
        }
        match (members.get("enum"), members.get("const")) {
            (Some(_), Some(_)) => {
                self.push(child(at, "const"), "cannot be combined with enum");
                None
            }
            (Some(list), None) => self.enumeration(list, &child(at, "enum"), ty),
            (None, Some(value)) if ty.holds(value) => Some(Choices {
                values: vec![value.clone()],
                is_const: true,
            }),
            (None, Some(_)) => {
                self.push(
                    child(at, "const"),
                    format!("must be {}, like the node", ty.spoken()),
                );
                None
            }
            (None, None) => None,
        }
    }

    fn enumeration(&mut self, list: &Value, at: &str, ty: JsonType) -> Option<Choices> {
        let values = match list.as_array() {
            Some(values) if !values.is_empty() => values,
            _ => {
                self.push(at, "must be a non-empty array");
                return None;
            }
        };
        let mut seen: Vec<String> = Vec::new();
        for (i, value) in values.iter().enumerate() {
            let key = canonical(value);
            if !ty.holds(value) {
                self.push(
                    format!("{at}/{i}"),
                    format!("must be {}, like the node", ty.spoken()),
                );
            } else if seen.contains(&key) {
                self.push(format!("{at}/{i}"), "duplicate entry");
            }
            seen.push(key);
        }
        Some(Choices {
            values: values.clone(),
            is_const: false,
        })
    }
}

/// "string", "integer or number", "string, integer, number, boolean or null".
fn spoken_list(types: &[JsonType]) -> String {
    let names: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}
