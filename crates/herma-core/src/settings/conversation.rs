//! The declarations of the typed-conversation settings, and the kinds only they use.
//!
//! These are read per turn, for the selected provider only (`herma_core::conversation::config`),
//! so one provider's broken setting never disables another and never stops `herma serve`;
//! `Settings::from_map` keeps their raw values ([`super::ConversationEnv`]) and parses only
//! `HERMA_CONVERSATION_ENABLED`.

use serde_json::{Map, Value};

use super::declare::{Describe, Family, Invalid, Kind, Member, Members, Setting};
use super::kinds::{BaseUrl, Choice, Credential, Number, OptionalText, Text};
use crate::money::{format_micros, parse_usd_micros, parse_usd_per_million_picos};

pub const META: Member = Member {
    key: "META",
    doc: "Meta Muse, Chat Completions at `https://api.meta.ai`",
};
pub const OLLAMA: Member = Member {
    key: "OLLAMA",
    doc: "Ollama Cloud, native `/api/chat` at `https://ollama.com`",
};
pub const OPENAI: Member = Member {
    key: "OPENAI",
    doc: "OpenAI Responses at `https://api.openai.com`",
};
pub const ANTHROPIC: Member = Member {
    key: "ANTHROPIC",
    doc: "Anthropic Messages at `https://api.anthropic.com`",
};
pub const OPENROUTER: Member = Member {
    key: "OPENROUTER",
    doc: "OpenRouter Chat Completions at `https://openrouter.ai`",
};

/// The five turn providers.
pub const PROVIDERS: Members = Members {
    placeholder: "PROVIDER",
    members: &[META, OLLAMA, OPENAI, ANTHROPIC, OPENROUTER],
};
/// The providers whose tariff is the operator's setting (Meta's comes from a dated table,
/// Ollama Cloud is capped by calls).
pub const PRICED: Members = Members {
    placeholder: "PRICED",
    members: &[OPENAI, ANTHROPIC, OPENROUTER],
};
/// The providers with a cumulative dollar budget.
pub const BUDGETED: Members = Members {
    placeholder: "BUDGETED",
    members: &[META, OPENAI, ANTHROPIC, OPENROUTER],
};
/// The providers a reasoning-effort setting applies to (Anthropic and Ollama take their
/// reasoning controls through generation JSON).
pub const REASONING_PROVIDERS: Members = Members {
    placeholder: "EFFORT",
    members: &[META, OPENAI, OPENROUTER],
};

/// A whole number within `min..=max`, unset by default.
#[derive(Clone, Copy, Debug)]
pub struct OptionalNumber {
    pub min: u64,
    pub max: u64,
}

impl Describe for OptionalNumber {
    fn shown_default(&self) -> Option<String> {
        None
    }

    fn accepts(&self) -> String {
        format!("`{}` to `{}`", self.min, self.max)
    }
}

impl Kind for OptionalNumber {
    type Value = Option<u64>;

    fn default_value(&self) -> Option<u64> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<u64>, Invalid> {
        let n = super::kinds::parse_decimal_u64(raw)?;
        if (self.min..=self.max).contains(&n) {
            Ok(Some(n))
        } else {
            Err(format!("{n} is outside {}..={}", self.min, self.max).into())
        }
    }
}

/// A positive dollar amount, exact to the microdollar, unset by default.
#[derive(Clone, Copy, Debug)]
pub struct Usd;

impl Describe for Usd {
    fn shown_default(&self) -> Option<String> {
        None
    }

    fn accepts(&self) -> String {
        "positive decimal dollars (`2.01`)".to_owned()
    }

    fn show(&self, raw: &str) -> String {
        parse_usd_micros(raw).map_or_else(|_| raw.to_owned(), |m| format!("${}", format_micros(m)))
    }
}

impl Kind for Usd {
    /// Microdollars.
    type Value = Option<u64>;

    fn default_value(&self) -> Option<u64> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<u64>, Invalid> {
        match parse_usd_micros(raw)? {
            0 => Err("must be more than 0".to_owned().into()),
            micros => Ok(Some(micros)),
        }
    }
}

/// Dollars per million tokens, exact to the picodollar per token, unset by default.
#[derive(Clone, Copy, Debug)]
pub struct UsdPerMillion;

impl Describe for UsdPerMillion {
    fn shown_default(&self) -> Option<String> {
        None
    }

    fn accepts(&self) -> String {
        "decimal dollars per million tokens (`1.25`)".to_owned()
    }
}

impl Kind for UsdPerMillion {
    /// Picodollars per token.
    type Value = Option<u64>;

    fn default_value(&self) -> Option<u64> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<u64>, Invalid> {
        Ok(Some(parse_usd_per_million_picos(raw)?))
    }
}

/// A JSON object, read strictly (duplicate keys refused); empty by default.
#[derive(Clone, Copy, Debug)]
pub struct JsonObject;

impl Describe for JsonObject {
    fn shown_default(&self) -> Option<String> {
        Some("{}".to_owned())
    }

    fn accepts(&self) -> String {
        "JSON object".to_owned()
    }
}

impl Kind for JsonObject {
    type Value = Map<String, Value>;

    fn default_value(&self) -> Map<String, Value> {
        Map::new()
    }

    fn parse(&self, raw: &str) -> Result<Map<String, Value>, Invalid> {
        match crate::json::parse_strict(raw.as_bytes()) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err("must be a JSON object".to_owned().into()),
            Err(problem) => Err(format!("is not acceptable JSON: {}", problem.detail).into()),
        }
    }
}

/// Raw JSON read by its own parser at turn time (the grants), unset by default.
#[derive(Clone, Copy, Debug)]
pub struct JsonText {
    pub form: &'static str,
    pub default: &'static str,
}

impl Describe for JsonText {
    fn shown_default(&self) -> Option<String> {
        Some(self.default.to_owned())
    }

    fn accepts(&self) -> String {
        self.form.to_owned()
    }

    /// Grants name key ids: shown only as set (an explicit default reads as the default).
    fn show(&self, raw: &str) -> String {
        if raw == self.default {
            raw.to_owned()
        } else {
            "[set]".to_owned()
        }
    }
}

impl Kind for JsonText {
    type Value = Option<String>;

    fn default_value(&self) -> Option<String> {
        None
    }

    fn parse(&self, raw: &str) -> Result<Option<String>, Invalid> {
        Ok(Some(raw.to_owned()))
    }
}

const ON_OFF_DISABLED: Choice<bool> = Choice {
    default: ("false", false),
    others: &[("true", true)],
};
/// The largest output allowance a setting may state (the provider decides what it supports).
pub const MAX_ALLOWANCE: u64 = u32::MAX as u64;

pub const ENABLED: Setting<Choice<bool>> = Setting {
    name: "HERMA_CONVERSATION_ENABLED",
    kind: ON_OFF_DISABLED,
    doc: "Whether `POST /v1/conversations/turn` accepts turns (operator-funded model proposals, `docs/conversations.md`).",
};
pub const META_MODEL: Setting<Text> = Setting {
    name: "HERMA_CONVERSATION_META_MODEL",
    kind: Text {
        default: "muse-spark-1.3",
        form: "model id with a known Meta tariff",
    },
    doc: "Meta's model for turns; its tariff comes from Herma's dated table of Meta's standard prices.",
};
pub const OLLAMA_MODEL: Setting<Text> = Setting {
    name: "HERMA_CONVERSATION_OLLAMA_MODEL",
    kind: Text {
        default: "muse-spark-open",
        form: "model id",
    },
    doc: "Ollama Cloud's model for turns.",
};
pub const OPENAI_MODEL: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_OPENAI_MODEL",
    kind: OptionalText { form: "model id" },
    doc: "OpenAI's model for turns; required when a turn selects OpenAI (no guessed model).",
};
pub const ANTHROPIC_MODEL: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_ANTHROPIC_MODEL",
    kind: OptionalText { form: "model id" },
    doc: "Anthropic's model for turns; required when a turn selects Anthropic (an API key, never a subscription).",
};
pub const OPENROUTER_MODEL: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_OPENROUTER_MODEL",
    kind: OptionalText {
        form: "fixed `vendor/model` id",
    },
    doc: "OpenRouter's fixed model; `openrouter/*` routers, `@preset` and `:online` variants are refused.",
};
pub const OPENROUTER_PROVIDER: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_OPENROUTER_PROVIDER",
    kind: OptionalText {
        form: "provider slug",
    },
    doc: "The one underlying provider OpenRouter must use (`provider.only` and `provider.order`); required with OpenRouter.",
};
pub const ANTHROPIC_VERSION: Setting<Choice<&'static str>> = Setting {
    name: "HERMA_CONVERSATION_ANTHROPIC_VERSION",
    kind: Choice {
        default: ("2026-10-21", "2026-10-21"),
        others: &[("2023-06-01", "2023-06-01")],
    },
    doc: "The `anthropic-version` turns send (2026-10-21 refuses legacy sampling parameters).",
};
pub const MAX_OUTPUT: Family<OptionalNumber> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_MAX_OUTPUT",
    members: &PROVIDERS,
    kind: OptionalNumber {
        min: 1,
        max: MAX_ALLOWANCE,
    },
    doc: "The provider's output allowance: the exact bound sent and the pre-call reservation. Required (no default, no hidden clamp).",
};
pub const SHARED_MAX_OUTPUT: Setting<OptionalNumber> = Setting {
    name: "HERMA_CONVERSATION_MAX_OUTPUT",
    kind: OptionalNumber {
        min: 1,
        max: MAX_ALLOWANCE,
    },
    doc: "Legacy shared allowance for providers without their own `_MAX_OUTPUT`.",
};
pub const REASONING: Family<OptionalText> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_REASONING",
    members: &REASONING_PROVIDERS,
    kind: OptionalText {
        form: "reasoning effort (`low`, `medium`, …)",
    },
    doc: "Reasoning effort sent to the provider; omitted unless set.",
};
pub const SHARED_REASONING: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_REASONING",
    kind: OptionalText {
        form: "reasoning effort",
    },
    doc: "Shared reasoning effort for Meta, OpenAI and OpenRouter without their own setting.",
};
pub const GENERATION: Family<JsonObject> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_GENERATION",
    members: &PROVIDERS,
    kind: JsonObject,
    doc: "Native generation settings merged into the request (Ollama `think`, `options.num_ctx`; Anthropic `thinking`); cannot replace the model, inputs, tools, storage or allowance.",
};
pub const INPUT_PRICE: Family<UsdPerMillion> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_INPUT_USD_PER_MILLION",
    members: &PRICED,
    kind: UsdPerMillion,
    doc: "The configured model's input price ceiling; required for the provider.",
};
pub const OUTPUT_PRICE: Family<UsdPerMillion> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_OUTPUT_USD_PER_MILLION",
    members: &PRICED,
    kind: UsdPerMillion,
    doc: "The configured model's output price ceiling; required for the provider.",
};
pub const BUDGET: Family<Usd> = Family {
    prefix: "HERMA_",
    suffix: "_BUDGET_USD",
    members: &BUDGETED,
    kind: Usd,
    doc: "The provider's cumulative reserved-dollar ceiling, shared by every caller and process on one database; required.",
};
pub const OLLAMA_CALLS_PER_DAY: Setting<Number> = Setting {
    name: "HERMA_OLLAMA_CALLS_PER_DAY",
    kind: Number {
        default: 30,
        min: 0,
        max: 1_000_000,
    },
    doc: "Ollama Cloud turns allowed per UTC day, shared by every caller and process on one database.",
};
pub const CALLER_TOKENS_PER_HOUR: Setting<OptionalNumber> = Setting {
    name: "HERMA_CONVERSATION_CALLER_TOKENS_PER_HOUR",
    kind: OptionalNumber {
        min: 1,
        max: u64::MAX >> 1,
    },
    doc: "Tokens (input ceiling plus allowance) one caller may reserve per hour; unlimited when unset.",
};
pub const GRANTS: Setting<JsonText> = Setting {
    name: "HERMA_CONVERSATION_PROVIDER_GRANTS",
    kind: JsonText {
        form: "JSON list of per-caller grants",
        default: "[]",
    },
    doc: "Which callers (`key:<key_id>`) may spend operator funds on which provider and model; none by default.",
};
pub const DEPRECATED_PLAN_ALLOWLIST: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_PROVIDER_PLAN_ALLOWLIST",
    kind: OptionalText {
        form: "deprecated: must be unset",
    },
    doc: "Deprecated deployment-wide grant: any value makes turns fail with `invalid_provider_configuration`; use per-caller grants.",
};
pub const DEPRECATED_UNCERTAIN_FAILOVER: Setting<OptionalText> = Setting {
    name: "HERMA_CONVERSATION_ALLOW_UNCERTAIN_FAILOVER",
    kind: OptionalText {
        form: "deprecated: must be unset",
    },
    doc: "Deprecated deployment-wide grant: any value makes turns fail with `invalid_provider_configuration`; use per-caller grants.",
};
pub const ACCOUNT_SCOPE: Family<OptionalText> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_ACCOUNT_SCOPE",
    members: &PROVIDERS,
    kind: OptionalText {
        form: "opaque account alias (lowercase letters, digits, `-_./`, at most 64)",
    },
    doc: "The operator account the provider's key belongs to (default `operator`): provider health is shared per provider, account and model. Use one alias for keys sharing an account limit; a different one only for a genuinely independent account.",
};
pub const DESTINATION: Family<BaseUrl> = Family {
    prefix: "HERMA_CONVERSATION_",
    suffix: "_BASE_URL",
    members: &PROVIDERS,
    kind: BaseUrl,
    doc: "Operator only, for a staging mock or a test: sends the provider's turns to this origin instead of its fixed HTTPS origin. `herma config check` warns loudly when set.",
};
pub const API_KEY: Family<Credential> = Family {
    prefix: "",
    suffix: "_API_KEY",
    members: &PROVIDERS,
    kind: Credential { min_chars: 0 },
    doc: "The operator's key for the provider, sent only to its destination; a missing key is a recorded `provider_not_configured` attempt.",
};
