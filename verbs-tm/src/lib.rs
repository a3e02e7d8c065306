//! # verbs-tm: a TM-SRQ driver over a provider trait
//!
//! (crate docs are written below, in full, once the pieces exist)
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod config;
mod endpoint;
mod error;
mod provider;
pub mod soft;
mod sync;
pub mod testing;
pub mod verbs;

pub use config::{EndpointConfig, ProviderChoice};
pub use endpoint::{
    CancelOutcome, Counters, Endpoint, Finished, MessageHandle, RecvStart, SendMode, SendStart,
    Status,
};
pub use error::{errno_name, Error, Result};
pub use provider::{Mr, Provider};

/// Whether a hardware TM device is usable: `Ok(name)` of the first device
/// with `IBV_TM_CAP_RC`, or [`Error::NoDevice`] with the reason in one line.
pub fn probe_hardware() -> Result<String> {
    Err(Error::NoDevice {
        reason: "built without the `ibverbs` feature".into(),
    })
}
