//! Liveness analysis and static memory planning.
