//! The conformance suite: one set of cases, instantiated for every backend.
