//! Host (CPU) implementations of the standard ops: the numerical reference.
