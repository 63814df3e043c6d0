//! A turn provider's configuration, read from the operator's settings for that provider only.
//!
//! [`ProviderConfig::resolve`] reads the selected provider's model, allowance, reasoning,
//! generation JSON, tariff, budget and destination, and refuses in one fixed order, before any
//! turn record, reservation or request:
//!
//! 1. `contributor_tier_refused` — the model (or any granted model) is contributor tier;
//! 2. `output_allowance_required` — neither `_MAX_OUTPUT` nor the shared allowance is set;
//! 3. `invalid_provider_configuration` — any other invalid or missing setting (a deprecated
//!    deployment-wide grant, a required model, tariff, budget or routing slug, a refused
//!    OpenRouter model form, generation JSON that would replace what Herma owns, invalid grants);
//! 4. `unsupported_generation_configuration` — generation settings this profile cannot account
//!    for (`n` other than 1, `best_of`, `prompt`, `speed`, `inference_geo`, another service tier).
//!
//! Empty or whitespace-only values are unset; numbers are plain decimal digits; money is exact
//! ([`crate::money`]). Another provider's settings are never read, so its broken value cannot
//! disable this one.

use serde_json::{Map, Value};

use crate::contributor::is_contributor_model;
use crate::money::Tariff;
use crate::problem::{FieldError, Problem, ProblemCode};
use crate::secret::Secret;
use crate::settings::ConversationEnv;
use crate::settings::conversation as table;
use crate::settings::declare::{Family, Invalid, Kind, Member, Setting};
use crate::upstream::Provider;

use super::generation::{self, forced_service_tier};
use super::grants::{GrantChoice, Grants};
use super::tariffs;

/// Where a provider's turns go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// `scheme://host[:port]`, no trailing slash.
    pub origin: String,
    pub path: &'static str,
    /// True when the operator pointed the provider elsewhere (`_BASE_URL`).
    pub overridden: bool,
}

impl Destination {
    pub fn url(&self) -> String {
        format!("{}{}", self.origin, self.path)
    }
}

/// The fixed HTTPS origin and path of each provider.
pub fn fixed_destination(provider: Provider) -> (&'static str, &'static str) {
    match provider {
        Provider::Meta => ("https://api.meta.ai", "/v1/chat/completions"),
        Provider::Ollama => ("https://ollama.com", "/api/chat"),
        Provider::Openai => ("https://api.openai.com", "/v1/responses"),
        Provider::Anthropic => ("https://api.anthropic.com", "/v1/messages"),
        Provider::Openrouter => ("https://openrouter.ai", "/api/v1/chat/completions"),
    }
}

/// How a provider's spending is capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pricing {
    /// A tariff and a cumulative dollar budget in microdollars.
    Metered { tariff: Tariff, budget_micros: u64 },
    /// Ollama Cloud: a number of calls per UTC day.
    Calls { per_day: u64 },
}

/// What one turn reserves before its request is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Input ceiling plus the allowance: what the caller's hourly tokens are charged.
    pub tokens: u64,
    /// The dollar ceiling in microdollars (`None` for a provider capped by calls).
    pub micros: Option<u64>,
}

/// One provider's validated configuration for a turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderConfig {
    pub provider: Provider,
    pub model: String,
    /// The exact output bound sent, and the output part of the reservation.
    pub allowance: u64,
    /// Reasoning effort (Meta, OpenAI, OpenRouter), when configured.
    pub reasoning: Option<String>,
    /// Native generation settings, merged into the request body.
    pub generation: Map<String, Value>,
    pub pricing: Pricing,
    /// Anthropic's `anthropic-version`.
    pub anthropic_version: Option<&'static str>,
    /// OpenRouter's one underlying provider.
    pub routing_provider: Option<String>,
    /// The operator account alias health is keyed by (`operator` unless configured).
    pub account: String,
    pub destination: Destination,
    /// The operator's key; `None` is a recorded `provider_not_configured` attempt.
    pub api_key: Option<Secret>,
}

/// Reads settings of one provider, keeping failures by outcome.
struct Read<'a> {
    env: &'a ConversationEnv,
    invalid: Vec<FieldError>,
}

impl Read<'_> {
    fn value<K: Kind>(&mut self, name: &str, kind: &K) -> K::Value {
        let Some(raw) = self.env.get(name) else {
            return kind.default_value();
        };
        kind.parse(raw).unwrap_or_else(|Invalid(details)| {
            for detail in details {
                self.fail(name, detail);
            }
            kind.default_value()
        })
    }

    fn get<K: Kind>(&mut self, setting: &Setting<K>) -> K::Value {
        self.value(setting.name, &setting.kind)
    }

    fn member<K: Kind>(&mut self, family: &Family<K>, member: &Member) -> K::Value {
        self.value(&family.name(member), &family.kind)
    }

    fn fail(&mut self, name: &str, detail: impl Into<String>) {
        self.invalid
            .push(FieldError::new("", format!("{name} {}", detail.into())));
    }

    fn require<T>(&mut self, value: Option<T>, name: &str, why: &str) -> Option<T> {
        if value.is_none() {
            self.fail(name, format!("is required {why}"));
        }
        value
    }
}

fn member(provider: Provider) -> &'static Member {
    match provider {
        Provider::Meta => &table::META,
        Provider::Ollama => &table::OLLAMA,
        Provider::Openai => &table::OPENAI,
        Provider::Anthropic => &table::ANTHROPIC,
        Provider::Openrouter => &table::OPENROUTER,
    }
}

fn problem(code: ProblemCode, errors: Vec<FieldError>) -> Problem {
    let detail = errors
        .iter()
        .map(|e| e.detail.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Problem::new(code, detail).with_errors(errors)
}

impl ProviderConfig {
    /// The provider's configuration, or the first outcome in the documented order.
    pub fn resolve(env: &ConversationEnv, provider: Provider) -> Result<Self, Problem> {
        let m = member(provider);
        let mut r = Read {
            env,
            invalid: Vec::new(),
        };
        let model = match provider {
            Provider::Meta => Some(r.get(&table::META_MODEL)),
            Provider::Ollama => Some(r.get(&table::OLLAMA_MODEL)),
            Provider::Openai => r.get(&table::OPENAI_MODEL),
            Provider::Anthropic => r.get(&table::ANTHROPIC_MODEL),
            Provider::Openrouter => r.get(&table::OPENROUTER_MODEL),
        };
        // 1. The contributor tier, before everything else.
        if let Some(model) = &model
            && is_contributor_model(model)
        {
            return Err(Problem::new(
                ProblemCode::ContributorTierRefused,
                format!(
                    "the configured {} model `{model}` is contributor tier and is refused",
                    provider.as_str()
                ),
            ));
        }
        if let Err(refused) = Grants::parse(env.get(table::GRANTS.name))
            && refused.code == ProblemCode::ContributorTierRefused
        {
            return Err(refused);
        }

        // 2. The allowance.
        let own = r.member(&table::MAX_OUTPUT, m);
        let shared = r.get(&table::SHARED_MAX_OUTPUT);
        let Some(allowance) = own.or(shared) else {
            if !r.invalid.is_empty() {
                return Err(problem(
                    ProblemCode::InvalidProviderConfiguration,
                    r.invalid,
                ));
            }
            return Err(Problem::new(
                ProblemCode::OutputAllowanceRequired,
                format!(
                    "{} (or the shared {}) must state the output allowance of operator-funded {} turns",
                    table::MAX_OUTPUT.name(m),
                    table::SHARED_MAX_OUTPUT.name,
                    provider.as_str()
                ),
            ));
        };

        // 3. Everything else.
        for deprecated in [
            &table::DEPRECATED_PLAN_ALLOWLIST,
            &table::DEPRECATED_UNCERTAIN_FAILOVER,
        ] {
            if env.get(deprecated.name).is_some() {
                r.fail(
                    deprecated.name,
                    "is a deprecated deployment-wide grant; unset it and grant callers in HERMA_CONVERSATION_PROVIDER_GRANTS",
                );
            }
        }
        let model = r.require(
            model,
            &model_setting(provider),
            "when turns select this provider (no guessed model)",
        );
        if let (Some(model), Provider::Openrouter) = (&model, provider) {
            check_openrouter_model(&mut r, model);
        }
        let reasoning = read_reasoning(&mut r, provider);
        let generation = r.member(&table::GENERATION, m);
        let findings = generation::check(provider, &generation);
        for owned in &findings.owned {
            r.fail(
                &table::GENERATION.name(m),
                format!("may not set `{owned}`: Herma owns it in a turn"),
            );
        }
        if reasoning.is_some() && generation.contains_key(reasoning_member(provider)) {
            r.fail(
                &table::GENERATION.name(m),
                format!(
                    "sets `{}` while a reasoning setting is configured; set one",
                    reasoning_member(provider)
                ),
            );
        }
        let pricing = read_pricing(&mut r, provider, model.as_deref());
        let anthropic_version =
            (provider == Provider::Anthropic).then(|| r.get(&table::ANTHROPIC_VERSION));
        let routing_provider = if provider == Provider::Openrouter {
            let slug = r.get(&table::OPENROUTER_PROVIDER);
            if let Some(slug) = &slug
                && !super::grants::is_slug(slug)
            {
                r.fail(
                    table::OPENROUTER_PROVIDER.name,
                    "must be one provider slug (lowercase, no wildcard)",
                );
            }
            r.require(
                slug,
                table::OPENROUTER_PROVIDER.name,
                "with OpenRouter (the one underlying provider)",
            )
        } else {
            None
        };
        let account = r.member(&table::ACCOUNT_SCOPE, m);
        if let Some(alias) = &account
            && !super::grants::is_slug(alias)
        {
            r.fail(
                &table::ACCOUNT_SCOPE.name(m),
                "must be an opaque alias: lowercase letters, digits, `-_./`, at most 64",
            );
        }
        let account = account.unwrap_or_else(|| super::health::DEFAULT_ACCOUNT.to_owned());
        let (origin, path) = fixed_destination(provider);
        let overridden = r.member(&table::DESTINATION, m);
        let destination = Destination {
            origin: overridden.as_ref().map_or_else(
                || origin.to_owned(),
                |url| url.origin().ascii_serialization(),
            ),
            path,
            overridden: overridden.is_some(),
        };
        if let Err(grants) = Grants::parse(env.get(table::GRANTS.name)) {
            r.invalid.extend(grants.errors.into_iter().map(|e| {
                FieldError::new(
                    "",
                    format!("{} {}: {}", table::GRANTS.name, e.pointer, e.detail),
                )
            }));
        }
        let api_key = r.member(&table::API_KEY, m);
        if !r.invalid.is_empty() {
            return Err(problem(
                ProblemCode::InvalidProviderConfiguration,
                r.invalid,
            ));
        }
        let (Some(model), Some(pricing)) = (model, pricing) else {
            return Err(Problem::new(
                ProblemCode::Internal,
                "configuration read incompletely",
            ));
        };

        // 4. What a turn cannot account for.
        if !findings.unsupported.is_empty() {
            let errors = findings
                .unsupported
                .iter()
                .map(|member| {
                    FieldError::new(
                        "",
                        format!(
                            "{} sets `{member}`, which a managed turn does not support",
                            table::GENERATION.name(m)
                        ),
                    )
                })
                .collect();
            return Err(problem(
                ProblemCode::UnsupportedGenerationConfiguration,
                errors,
            ));
        }
        Ok(Self {
            provider,
            model,
            allowance,
            reasoning,
            generation,
            pricing,
            anthropic_version,
            routing_provider,
            account,
            destination,
            api_key,
        })
    }

    /// The grant choice this configuration is: what the caller's grant must name exactly.
    pub fn choice(&self) -> GrantChoice {
        GrantChoice {
            provider: self.provider,
            model: self.model.clone(),
            routing_provider: self.routing_provider.clone(),
        }
    }

    /// The most one turn can cost, reserved before dispatch: every input byte counted as a
    /// token (no tokenizer makes a token of less than one byte) plus the whole allowance.
    pub fn reservation(&self, input_bytes: u64) -> Reservation {
        let tokens = input_bytes.saturating_add(self.allowance);
        let micros = match self.pricing {
            Pricing::Metered { tariff, .. } => {
                let micros = tariff.ceiling_micros(input_bytes, self.allowance);
                Some(u64::try_from(micros).unwrap_or(u64::MAX))
            }
            Pricing::Calls { .. } => None,
        };
        Reservation { tokens, micros }
    }

    /// The service tier every request of this provider states.
    pub fn service_tier(&self) -> Option<&'static str> {
        forced_service_tier(self.provider)
    }
}

fn model_setting(provider: Provider) -> String {
    match provider {
        Provider::Meta => table::META_MODEL.name,
        Provider::Ollama => table::OLLAMA_MODEL.name,
        Provider::Openai => table::OPENAI_MODEL.name,
        Provider::Anthropic => table::ANTHROPIC_MODEL.name,
        Provider::Openrouter => table::OPENROUTER_MODEL.name,
    }
    .to_owned()
}

/// OpenRouter's automatic routers, presets and online variants pick models or tools Herma did
/// not choose.
fn check_openrouter_model(r: &mut Read<'_>, model: &str) {
    let name = table::OPENROUTER_MODEL.name;
    let lower = model.to_ascii_lowercase();
    if lower.starts_with("openrouter/") {
        r.fail(name, "may not be an `openrouter/*` automatic router");
    }
    if model.contains('@') {
        r.fail(name, "may not use `@preset` syntax");
    }
    if lower.ends_with(":online") {
        r.fail(name, "may not be an `:online` variant");
    }
    if !model.contains('/') {
        r.fail(name, "must be a fixed `vendor/model` id");
    }
}

/// The generation member a reasoning setting becomes.
fn reasoning_member(provider: Provider) -> &'static str {
    match provider {
        Provider::Meta => "reasoning_effort",
        _ => "reasoning",
    }
}

fn read_reasoning(r: &mut Read<'_>, provider: Provider) -> Option<String> {
    let effort_member = table::REASONING_PROVIDERS
        .members
        .iter()
        .find(|m| m.key == member(provider).key)?;
    let own = r.member(&table::REASONING, effort_member);
    let effort = own.or_else(|| r.get(&table::SHARED_REASONING))?;
    let word = (1..=16).contains(&effort.len()) && effort.bytes().all(|b| b.is_ascii_lowercase());
    if !word {
        r.fail(
            &table::REASONING.name(effort_member),
            "must be one lowercase effort word such as `low` or `high`",
        );
        return None;
    }
    Some(effort)
}

fn read_pricing(r: &mut Read<'_>, provider: Provider, model: Option<&str>) -> Option<Pricing> {
    let m = member(provider);
    let budget = |r: &mut Read<'_>| {
        let member = table::BUDGETED.members.iter().find(|b| b.key == m.key)?;
        let value = r.member(&table::BUDGET, member);
        r.require(
            value,
            &table::BUDGET.name(member),
            "(a positive cumulative dollar ceiling)",
        )
    };
    match provider {
        Provider::Ollama => Some(Pricing::Calls {
            per_day: r.get(&table::OLLAMA_CALLS_PER_DAY),
        }),
        Provider::Meta => {
            let tariff = model.and_then(|model| {
                let tariff = tariffs::meta(model);
                if tariff.is_none() {
                    r.fail(
                        table::META_MODEL.name,
                        format!("`{model}` has no known Meta tariff (table checked {}); its price is never guessed", tariffs::CHECKED),
                    );
                }
                tariff
            });
            let budget = budget(r);
            Some(Pricing::Metered {
                tariff: tariff?,
                budget_micros: budget?,
            })
        }
        Provider::Openai | Provider::Anthropic | Provider::Openrouter => {
            let priced = table::PRICED.members.iter().find(|p| p.key == m.key)?;
            let input = r.member(&table::INPUT_PRICE, priced);
            let input = r.require(
                input,
                &table::INPUT_PRICE.name(priced),
                "(the model's input price ceiling)",
            );
            let output = r.member(&table::OUTPUT_PRICE, priced);
            let output = r.require(
                output,
                &table::OUTPUT_PRICE.name(priced),
                "(the model's output price ceiling)",
            );
            let budget = budget(r);
            let (input, output) = (input?, output?);
            Some(Pricing::Metered {
                tariff: Tariff {
                    input_picos_per_token: input,
                    output_picos_per_token: output,
                    cached_input_picos_per_token: input,
                },
                budget_micros: budget?,
            })
        }
    }
}

/// The caller's hourly token allowance across every provider, when configured.
pub fn caller_tokens_per_hour(env: &ConversationEnv) -> Result<Option<u64>, Problem> {
    let mut r = Read {
        env,
        invalid: Vec::new(),
    };
    let value = r.get(&table::CALLER_TOKENS_PER_HOUR);
    if r.invalid.is_empty() {
        Ok(value)
    } else {
        Err(problem(
            ProblemCode::InvalidProviderConfiguration,
            r.invalid,
        ))
    }
}

/// The operator's grants, validated (a contributor-tier model in them is refused first).
pub fn grants(env: &ConversationEnv) -> Result<Grants, Problem> {
    Grants::parse(env.get(table::GRANTS.name))
}
