//! Cooldowns: which observed conditions limit a provider resource, what else they hold (the
//! upstream model identity, the whole account), and how long — the delay math the shared health
//! coordinator applies. Only normalized seconds and a fixed source label are kept; no header
//! text survives.
//!
//! Conditions ([`Condition::of`]): diagnosed credit or quota exhaustion and any 402 are
//! `credit_exhausted` (checked first: OpenAI's 429 `insufficient_quota` is credit, not rate);
//! 429 and a diagnosed rate limit are `rate_limited`; 503/529 and an unreachable provider are
//! `unavailable`; a timeout, an unknown outcome or an unreadable reply is `uncertain`. Anything
//! else (a request the model does not take, a bad credential) limits nothing.
//!
//! Holds: `rate_limited` and `credit_exhausted` also hold the attempted upstream model identity
//! for the same delay (other routes to it are skipped, H17); `credit_exhausted` blocks the
//! provider account across models.
//!
//! The delay ([`cooldown`]), from the first usable source:
//! 1. `Retry-After`: decimal seconds, or an HTTP-date (IMF-fixdate, RFC 850 or asctime, RFC 9110
//!    §5.6.7) relative to `now` → `retry_after`;
//! 2. OpenAI's `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens` durations (`1m30s`,
//!    `6s`, `250ms`, `1h2m3.5s`: units `h`, `m`, `s`, `ms` in that order, each at most once,
//!    fractions allowed) → `openai_reset`;
//! 3. Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset`
//!    RFC 3339 times relative to `now` → `anthropic_reset`;
//! 4. else backoff: 30 s, or 300 s for `credit_exhausted`, doubled per repeated unsuccessful
//!    recovery → `backoff`.
//!
//! Where a source has several headers, the latest reset wins (every limit must have reset).
//! Fractions round up to the whole second; a time already past is 0 s. Every delay, guidance
//! included, is at most [`MAX_COOLDOWN_SECONDS`]: after an hour a single recovery probe (one
//! request within its allowance) asks again. Header names match case-insensitively and values
//! are trimmed; only the first header of a name is read.

use serde::{Deserialize, Serialize};
use time::{Date, Month, PrimitiveDateTime, Time};

use super::identity::upstream_identity;
use super::providers::{AttemptOutcome, DiagnosticReason, ProviderDiagnostics};
use crate::time::Timestamp;
use crate::upstream::Provider;

/// The longest cooldown, in seconds.
pub const MAX_COOLDOWN_SECONDS: u64 = 3600;
/// The first backoff.
pub const BACKOFF_SECONDS: u64 = 30;
/// The first backoff after a credit or payment condition.
pub const CREDIT_BACKOFF_SECONDS: u64 = 300;

const OPENAI_RESET_HEADERS: [&str; 2] = ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"];
const ANTHROPIC_RESET_HEADERS: [&str; 4] = [
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
];
/// Diagnosed rate limits: Anthropic's `rate_limit_error`, OpenAI's `tokens`/`requests` types
/// and `rate_limit_exceeded` code.
const RATE_LIMIT_TYPES: [&str; 3] = ["rate_limit_error", "tokens", "requests"];
const RATE_LIMIT_CODES: [&str; 1] = ["rate_limit_exceeded"];

/// What an attempt says about the health of the resource it used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    RateLimited,
    CreditExhausted,
    Unavailable,
    Uncertain,
}

impl Condition {
    pub const fn as_str(self) -> &'static str {
        match self {
            Condition::RateLimited => "rate_limited",
            Condition::CreditExhausted => "credit_exhausted",
            Condition::Unavailable => "unavailable",
            Condition::Uncertain => "uncertain",
        }
    }

    /// The condition an attempt's outcome and diagnostics open, if any.
    pub fn of(outcome: AttemptOutcome, diagnostics: Option<&ProviderDiagnostics>) -> Option<Self> {
        let credit =
            diagnostics.is_some_and(|d| d.reason == DiagnosticReason::CreditOrQuotaExhausted);
        let rate = diagnostics.is_some_and(|d| {
            d.error_type
                .as_deref()
                .is_some_and(|t| RATE_LIMIT_TYPES.contains(&t))
                || d.error_code
                    .as_deref()
                    .is_some_and(|c| RATE_LIMIT_CODES.contains(&c))
        });
        let observed = match outcome {
            AttemptOutcome::ProviderPaymentRequired => Some(Condition::CreditExhausted),
            AttemptOutcome::ProviderRateLimited => Some(Condition::RateLimited),
            AttemptOutcome::ProviderRejected if rate => Some(Condition::RateLimited),
            AttemptOutcome::ProviderRejected => None,
            AttemptOutcome::ProviderUnavailable => Some(Condition::Unavailable),
            AttemptOutcome::ProviderOutcomeUncertain | AttemptOutcome::ProviderInvalidResponse => {
                Some(Condition::Uncertain)
            }
            AttemptOutcome::Completed
            | AttemptOutcome::ProviderNotConfigured
            | AttemptOutcome::ProviderBudgetDenied
            | AttemptOutcome::CallerBudgetDenied
            | AttemptOutcome::StorageOrCoordinationUnavailable
            | AttemptOutcome::ProviderOperatorDisabled
            | AttemptOutcome::ProviderIdentityCooldown => return None,
        };
        if credit {
            Some(Condition::CreditExhausted)
        } else {
            observed
        }
    }

    /// Also holds the attempted upstream model identity against other routes (H17).
    pub const fn holds_identity(self) -> bool {
        matches!(self, Condition::RateLimited | Condition::CreditExhausted)
    }

    /// Blocks the provider account across every model.
    pub const fn blocks_account(self) -> bool {
        matches!(self, Condition::CreditExhausted)
    }

    /// The identity held for the delay when `model` through `provider` met this condition.
    pub fn held_identity(self, provider: Provider, model: &str) -> Option<String> {
        self.holds_identity()
            .then(|| upstream_identity(provider, model))
    }

    const fn first_backoff(self) -> u64 {
        match self {
            Condition::CreditExhausted => CREDIT_BACKOFF_SECONDS,
            Condition::RateLimited | Condition::Unavailable | Condition::Uncertain => {
                BACKOFF_SECONDS
            }
        }
    }
}

/// Where a delay came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CooldownSource {
    RetryAfter,
    OpenaiReset,
    AnthropicReset,
    Backoff,
}

impl CooldownSource {
    pub const fn as_str(self) -> &'static str {
        match self {
            CooldownSource::RetryAfter => "retry_after",
            CooldownSource::OpenaiReset => "openai_reset",
            CooldownSource::AnthropicReset => "anthropic_reset",
            CooldownSource::Backoff => "backoff",
        }
    }
}

/// A delay, normalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cooldown {
    pub seconds: u64,
    pub source: CooldownSource,
}

impl Cooldown {
    /// When the resource becomes eligible again.
    pub fn until(self, now: Timestamp) -> Timestamp {
        let millis = i64::try_from(self.seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        now.plus_millis(millis)
    }
}

/// The delay for `condition`, from the reply's `headers` (none for a timeout) at `now`, after
/// `repeated_failures` earlier unsuccessful recoveries of the same resource (0 the first time).
pub fn cooldown(
    condition: Condition,
    headers: &[(String, String)],
    now: Timestamp,
    repeated_failures: u32,
) -> Cooldown {
    let guided = retry_after(headers, now)
        .map(|ms| (ms, CooldownSource::RetryAfter))
        .or_else(|| openai_reset(headers).map(|ms| (ms, CooldownSource::OpenaiReset)))
        .or_else(|| anthropic_reset(headers, now).map(|ms| (ms, CooldownSource::AnthropicReset)));
    match guided {
        Some((millis, source)) => Cooldown {
            seconds: (millis.div_ceil(1000)).min(MAX_COOLDOWN_SECONDS),
            source,
        },
        None => Cooldown {
            seconds: backoff(condition.first_backoff(), repeated_failures),
            source: CooldownSource::Backoff,
        },
    }
}

/// Whether a reply header is guidance [`cooldown`] reads (`Retry-After` and the providers' reset
/// headers): the only headers worth keeping from a reply for health.
pub fn is_guidance_header(name: &str) -> bool {
    name.eq_ignore_ascii_case("retry-after")
        || OPENAI_RESET_HEADERS
            .iter()
            .chain(&ANTHROPIC_RESET_HEADERS)
            .any(|known| name.eq_ignore_ascii_case(known))
}

fn backoff(first: u64, repeated_failures: u32) -> u64 {
    let mut seconds = first.min(MAX_COOLDOWN_SECONDS);
    for _ in 0..repeated_failures {
        if seconds == MAX_COOLDOWN_SECONDS {
            break;
        }
        seconds = seconds.saturating_mul(2).min(MAX_COOLDOWN_SECONDS);
    }
    seconds
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.trim())
}

/// Milliseconds from `now` until `then`, 0 when already past.
fn millis_until(then: i64, now: Timestamp) -> u64 {
    u64::try_from(then.saturating_sub(now.as_millis())).unwrap_or(0)
}

/// `Retry-After` in milliseconds.
fn retry_after(headers: &[(String, String)], now: Timestamp) -> Option<u64> {
    let value = header(headers, "retry-after")?;
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds = value.bytes().fold(0u64, |n, b| {
            n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        });
        return Some(seconds.saturating_mul(1000));
    }
    http_date_millis(value, now).map(|then| millis_until(then, now))
}

/// The latest OpenAI reset, in milliseconds.
fn openai_reset(headers: &[(String, String)]) -> Option<u64> {
    OPENAI_RESET_HEADERS
        .iter()
        .filter_map(|name| header(headers, name).and_then(duration_millis))
        .max()
}

/// The latest Anthropic reset, in milliseconds from `now`.
fn anthropic_reset(headers: &[(String, String)], now: Timestamp) -> Option<u64> {
    ANTHROPIC_RESET_HEADERS
        .iter()
        .filter_map(|name| header(headers, name).and_then(Timestamp::parse_rfc3339))
        .map(|then| millis_until(then.as_millis(), now))
        .max()
}

/// An OpenAI duration (`1h2m3.5s`, `250ms`) in milliseconds, rounded up.
fn duration_millis(raw: &str) -> Option<u64> {
    const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)];
    let mut rest = raw;
    let mut next_unit = 0;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| !c.is_ascii_lowercase())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let position = UNITS[next_unit..].iter().position(|(u, _)| *u == unit)?;
        let scale = UNITS[next_unit + position].1;
        next_unit += position + 1;
        total = total.saturating_add(scaled(number, scale)?);
        rest = tail;
    }
    Some(total)
}

/// `number` (digits, optionally `.` and more digits) times `scale`, rounded up.
fn scaled(number: &str, scale: u64) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (number.contains('.') && !digits(fraction)) || fraction.len() > 9 {
        return None;
    }
    let parse = |s: &str| {
        s.bytes().fold(0u64, |n, b| {
            n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        })
    };
    let denominator = 10u64.pow(u32::try_from(fraction.len()).ok()?);
    let part = parse(fraction).saturating_mul(scale).div_ceil(denominator);
    Some(parse(whole).saturating_mul(scale).saturating_add(part))
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// An HTTP-date (RFC 9110 §5.6.7) in milliseconds since the epoch. An RFC 850 two-digit year
/// more than 50 years after `now` is read in the previous century.
fn http_date_millis(raw: &str, now: Timestamp) -> Option<i64> {
    let parts: Vec<&str> = raw.split(' ').filter(|p| !p.is_empty()).collect();
    let (year, month, day, clock) = match parts.as_slice() {
        // IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`
        [weekday, day, month, year, clock, "GMT"]
            if weekday.strip_suffix(',').is_some_and(|d| DAYS.contains(&d))
                && day.len() == 2
                && year.len() == 4 =>
        {
            (number(year)?, *month, number(day)?, *clock)
        }
        // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`
        [weekday, date, clock, "GMT"]
            if weekday
                .strip_suffix(',')
                .is_some_and(|d| LONG_DAYS.contains(&d)) =>
        {
            let mut fields = date.split('-');
            let (day, month, year) = (fields.next()?, fields.next()?, fields.next()?);
            if fields.next().is_some() || day.len() != 2 || year.len() != 2 {
                return None;
            }
            (
                two_digit_year(number(year)?, now)?,
                month,
                number(day)?,
                *clock,
            )
        }
        // asctime: `Sun Nov  6 08:49:37 1994`
        [weekday, month, day, clock, year]
            if DAYS.contains(weekday) && (1..=2).contains(&day.len()) && year.len() == 4 =>
        {
            (number(year)?, *month, number(day)?, *clock)
        }
        _ => return None,
    };
    let month = MONTHS.iter().position(|m| *m == month)?;
    let month = Month::try_from(u8::try_from(month + 1).ok()?).ok()?;
    let date =
        Date::from_calendar_date(i32::try_from(year).ok()?, month, u8::try_from(day).ok()?).ok()?;
    let mut hms = clock.split(':');
    let (h, m, s) = (hms.next()?, hms.next()?, hms.next()?);
    if hms.next().is_some() || [h, m, s].iter().any(|p| p.len() != 2) {
        return None;
    }
    let time = Time::from_hms(
        u8::try_from(number(h)?).ok()?,
        u8::try_from(number(m)?).ok()?,
        u8::try_from(number(s)?).ok()?,
    )
    .ok()?;
    PrimitiveDateTime::new(date, time)
        .assume_utc()
        .unix_timestamp()
        .checked_mul(1000)
}

fn number(digits: &str) -> Option<u32> {
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn two_digit_year(yy: u32, now: Timestamp) -> Option<u32> {
    let seconds = now.as_millis().div_euclid(1000);
    let current = time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()?
        .year();
    let current = u32::try_from(current).ok()?;
    let candidate = current - current % 100 + yy;
    Some(if candidate > current + 50 {
        candidate - 100
    } else {
        candidate
    })
}

#[cfg(test)]
mod tests;
