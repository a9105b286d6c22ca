//! Flag parsing shared by the tools.

use super::*;

#[test]
fn timeouts_parse_as_seconds_with_zero_for_no_limit() {
    assert_eq!(
        parse_timeout("60").unwrap(),
        WaitTimeout(Some(Duration::from_secs(60)))
    );
    assert_eq!(
        parse_timeout("0.25").unwrap(),
        WaitTimeout(Some(Duration::from_millis(250)))
    );
    assert_eq!(parse_timeout("0").unwrap(), WaitTimeout(None));
    for bad in ["-1", "abc", "", "inf", "NaN", "1e300"] {
        let e = parse_timeout(bad).unwrap_err();
        assert!(e.contains(&format!("'{bad}'")), "{bad}: {e}");
    }
}

#[test]
fn device_args_pass_the_timeout_to_backends_and_the_runtime() {
    use clap::Parser;
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        device: DeviceArgs,
    }
    let t = T::try_parse_from(["t", "--backend", "host", "--timeout", "2.5"]).unwrap();
    assert_eq!(t.device.backend, BackendChoice::Host);
    assert_eq!(
        t.device.select_options().wait_timeout,
        Some(Duration::from_millis(2500))
    );
    assert_eq!(
        t.device.runtime_config().wait_timeout,
        Some(Duration::from_millis(2500))
    );
    let t = T::try_parse_from(["t", "--timeout", "0"]).unwrap();
    assert_eq!(t.device.runtime_config().wait_timeout, Some(Duration::MAX));
    let t = T::try_parse_from(["t"]).unwrap();
    assert_eq!(t.device.backend, BackendChoice::Auto);
    assert_eq!(t.device.select_options(), SelectOptions::default());
    assert!(T::try_parse_from(["t", "--backend", "lavapipe"]).is_err());
}

#[test]
fn progress_bars_are_hidden_when_quiet() {
    assert!(progress(3, "runs", true).is_hidden());
    assert!(spinner("reading", true).is_hidden());
}

#[test]
fn device_budgets_parse_with_units_and_percentages() {
    assert_eq!(
        parse_device_budget("1048576"),
        Ok(DeviceBudget::Bytes(1 << 20))
    );
    assert_eq!(
        parse_device_budget("64MiB"),
        Ok(DeviceBudget::Bytes(64 << 20))
    );
    assert_eq!(
        parse_device_budget("64m"),
        Ok(DeviceBudget::Bytes(64 << 20))
    );
    assert_eq!(
        parse_device_budget("500MB"),
        Ok(DeviceBudget::Bytes(500_000_000))
    );
    assert_eq!(
        parse_device_budget("1.5GiB"),
        Ok(DeviceBudget::Bytes(3 << 29))
    );
    assert_eq!(
        parse_device_budget(" 50% "),
        Ok(DeviceBudget::Percent(50.0))
    );
    assert_eq!(DeviceBudget::Percent(35.0).resolve(1000), 350);
    assert_eq!(DeviceBudget::Bytes(7).resolve(1000), 7);
    for bad in [
        "", "0", "0%", "101%", "-5MiB", "12XB", "MiB", "1e99GiB", "nan%",
    ] {
        assert!(parse_device_budget(bad).is_err(), "{bad:?} parsed");
    }
}
