use super::*;
use crate::backend::InPlaceGrowth;

#[test]
fn a_limit_admits_up_to_itself() {
    assert!(Error::check_limit("block", 100, 100, "max_block_size").is_ok());
    assert!(matches!(
        Error::check_limit("block", 101, 100, "max_block_size"),
        Err(Error::TooLarge {
            what: "block",
            requested: 101,
            limit: 100,
            limit_name: "max_block_size",
        })
    ));
}

#[test]
fn block_size_rules() {
    assert!(matches!(
        Error::check_block_size(0, 100),
        Err(Error::ZeroSize { what: "block" })
    ));
    assert!(Error::check_block_size(100, 100).is_ok());
    assert!(matches!(
        Error::check_block_size(u64::MAX, 100),
        Err(Error::TooLarge {
            requested: u64::MAX,
            limit: 100,
            ..
        })
    ));
}

#[test]
fn committed_sizes_are_whole_granules_within_the_limit() {
    let growth = InPlaceGrowth {
        granularity: 4096,
        max_reserve: 1 << 20,
        holes: false,
        whole_units: false,
    };
    assert!(growth.check_committed(8192, 8192, "reservation").is_ok());
    assert!(matches!(
        growth.check_committed(4097, 8192, "reservation"),
        Err(Error::Misaligned {
            value: 4097,
            align: 4096,
            ..
        })
    ));
    assert!(matches!(
        growth.check_committed(12288, 8192, "reservation"),
        Err(Error::TooLarge {
            limit_name: "reservation",
            ..
        })
    ));
}
