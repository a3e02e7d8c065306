//! # verbs-tm: a TM-SRQ driver over a provider trait
//!
//! (crate docs are written below, in full, once the pieces exist)
#![warn(missing_docs)]
#![deny(unsafe_code)]

mod auto;
pub mod config;
mod endpoint;
mod error;
#[cfg(feature = "ibverbs")]
#[allow(unsafe_code)]
pub mod ibverbs;
mod provider;
pub mod soft;
mod sync;
pub mod testing;
pub mod verbs;

pub use auto::{probe_hardware, AnyProvider};
pub use config::{EndpointConfig, ProviderChoice};
pub use endpoint::{
    CancelOutcome, Counters, Endpoint, Finished, MessageHandle, RecvStart, SendMode, SendStart,
    Status,
};
pub use error::{errno_name, Error, Result};
pub use provider::{Mr, Provider};
