//! The planners' errors in the runtime's type: each [`tensormem_plan::Error`] variant becomes the
//! [`Error`] variant of the same name and fields, so the planners' refusals read and match the
//! same through `tensormem` as before they had a crate of their own.

use tensormem_plan::Error as Plan;

use super::Error;

impl From<Plan> for Error {
    fn from(e: Plan) -> Self {
        match e {
            Plan::ZeroSize { what } => Error::ZeroSize { what },
            Plan::InvalidAlignment { align, max } => Error::InvalidAlignment { align, max },
            Plan::TooLarge {
                what,
                requested,
                limit,
                limit_name,
            } => Error::TooLarge {
                what,
                requested,
                limit,
                limit_name,
            },
            Plan::DoubleFree {
                what,
                slot,
                generation,
            } => Error::DoubleFree {
                what,
                slot,
                generation,
            },
            Plan::StaleHandle {
                what,
                slot,
                generation,
                current,
            } => Error::StaleHandle {
                what,
                slot,
                generation,
                current,
            },
            Plan::ForeignHandle { what, slot, owner } => Error::ForeignHandle { what, slot, owner },
            Plan::OutOfBounds {
                what,
                offset,
                size,
                limit,
            } => Error::OutOfBounds {
                what,
                offset,
                size,
                limit,
            },
            Plan::SizeMismatch {
                what,
                expected,
                actual,
            } => Error::SizeMismatch {
                what,
                expected,
                actual,
            },
            Plan::Misaligned {
                what,
                value,
                align,
                align_name,
            } => Error::Misaligned {
                what,
                value,
                align,
                align_name,
            },
            Plan::Argument(e) => Error::Argument(e),
            Plan::Malformed {
                source_name,
                line,
                message,
            } => Error::Malformed {
                source_name,
                line,
                message,
            },
            Plan::PlanTooLarge {
                buffers,
                padded_total,
                limit,
            } => Error::PlanTooLarge {
                buffers,
                padded_total,
                limit,
            },
            Plan::BudgetBelowWorkingSet {
                step,
                op,
                needed,
                budget,
            } => Error::BudgetBelowWorkingSet {
                step,
                op,
                needed,
                budget,
            },
            Plan::InvariantViolated { invariant, detail } => {
                Error::InvariantViolated { invariant, detail }
            }
        }
    }
}

#[cfg(test)]
mod tests;
