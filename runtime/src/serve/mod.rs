//! The serving library: what a server needs to put a model behind HTTP.
//!
//! Compiled with the crate's `serve` feature. Today it holds the Open
//! Inference Protocol's codec ([`oip`]): request bodies into tensors, tensors
//! into response bodies, model metadata and the protocol's error bodies,
//! independent of any HTTP framework.

pub mod oip;
