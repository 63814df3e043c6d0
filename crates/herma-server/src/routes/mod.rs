//! Route handlers, grouped by resource. Each handler extracts, calls one service, maps the result.

pub mod admin;
pub mod conversations;
pub mod dry_run;
pub mod mcp;
pub mod memory;
pub mod pages;

pub mod proxy;
pub mod public;

pub mod receipts;

pub mod records;
pub mod system;

use serde::Deserialize;

/// `?scope=system_builtin` addresses the built-in records (writes: an admin key that also has
/// `configure` and attests its harness, H02).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScopeQuery {
    /// `system_builtin` to address the starters shipped with Herma; omit for your own records.
    #[param(example = "system_builtin")]
    pub scope: Option<ScopeParam>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScopeParam {
    SystemBuiltin,
}

impl ScopeQuery {
    pub fn partition(&self) -> herma_app::records::Partition {
        match self.scope {
            Some(ScopeParam::SystemBuiltin) => herma_app::records::Partition::Builtin,
            None => herma_app::records::Partition::Own,
        }
    }

    pub fn write_requirement(&self) -> herma_core::gate::Requirement {
        match self.scope {
            Some(ScopeParam::SystemBuiltin) => herma_core::gate::Requirement::ManageBuiltins,
            None => herma_core::gate::Requirement::Configure,
        }
    }
}
