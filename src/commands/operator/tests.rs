use super::*;
use crate::egress;

#[test]
fn byte_sizes() {
    assert_eq!(parse_bytes("16Mi"), Ok(16 << 20));
    assert_eq!(parse_bytes("1000"), Ok(1000));
    assert_eq!(parse_bytes("2K"), Ok(2000));
    assert!(parse_bytes("0").is_err());
    assert!(parse_bytes("1Zi").unwrap_err().contains("unknown unit"));
    assert!(parse_bytes("lots").unwrap_err().contains("not a size"));
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: OperatorArgs,
}

fn parse(extra: &[&str]) -> Result<OperatorArgs, clap::Error> {
    use clap::Parser;
    let argv = ["operator", "--operator-image=i"].iter().chain(extra);
    Cli::try_parse_from(argv).map(|c| c.args)
}

#[test]
fn egress_flags_default_repeat_and_refuse_bad_values() {
    let cidrs = |l: &[&str]| -> Vec<Cidr> { l.iter().map(|c| c.parse().unwrap()).collect() };
    let args = parse(&[]).unwrap();
    assert_eq!(args.deny_cidrs(), cidrs(&egress::DEFAULT_DENY));
    assert!(args.allow_cidrs().is_empty());
    assert_eq!(args.egress_policy(), egress::Policy::default());
    // The new names and the old ones (aliases) are the same lists: they add up.
    for (deny, allow) in [
        ("--egress-deny-cidr", "--egress-allow-cidr"),
        ("--json-deny-cidr", "--json-allow-cidr"),
    ] {
        let args = parse(&[
            &format!("{deny}=10.0.0.0/8,127.0.0.0/8"),
            deny,
            "::1",
            &format!("{allow}=10.1.0.0/16"),
        ])
        .unwrap();
        let want = cidrs(&["10.0.0.0/8", "127.0.0.0/8", "::1/128"]);
        assert_eq!(args.deny_cidrs(), want, "{deny}");
        assert_eq!(args.allow_cidrs(), cidrs(&["10.1.0.0/16"]), "{allow}");
        assert_eq!(
            args.egress_policy(),
            egress::Policy::new(want, cidrs(&["10.1.0.0/16"]))
        );
    }
    let args = parse(&[
        "--egress-deny-cidr=10.0.0.0/8",
        "--json-deny-cidr=::1",
        "--json-allow-cidr=10.1.0.0/16",
        "--egress-allow-cidr=10.2.0.0/16",
    ])
    .unwrap();
    assert_eq!(args.deny_cidrs(), cidrs(&["10.0.0.0/8", "::1/128"]));
    assert_eq!(args.allow_cidrs(), cidrs(&["10.2.0.0/16", "10.1.0.0/16"]));
    for flag in ["--egress-deny-private-ranges", "--json-deny-private-ranges"] {
        assert_eq!(
            parse(&[flag]).unwrap().egress_policy(),
            egress::Policy::default().deny_private_ranges(),
            "{flag}"
        );
    }
    for bad in [
        "--egress-deny-cidr=10.0.0.0/33",
        "--json-deny-cidr=10.0.0.0/33",
        "--egress-allow-cidr=",
        "--json-allow-cidr=",
        "--egress-allow-cidr=x",
        "--json-allow-cidr=x",
    ] {
        let e = parse(&[bad]).err().unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
    }
}

#[test]
fn old_egress_flag_names_are_hidden_and_named_in_the_new_ones_help() {
    use clap::CommandFactory;
    let cmd = Cli::command();
    for (new, old) in [
        ("egress_deny_cidrs", "json-deny-cidr"),
        ("egress_allow_cidrs", "json-allow-cidr"),
        ("egress_deny_private_ranges", "json-deny-private-ranges"),
    ] {
        let arg = cmd.get_arguments().find(|a| a.get_id() == new).unwrap();
        assert!(!arg.is_hide_set(), "{new}");
        let help = arg.get_long_help().or(arg.get_help()).unwrap().to_string();
        assert!(help.contains(&format!("--{old}")), "{new}: {help}");
        let alias = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(old))
            .unwrap();
        assert!(alias.is_hide_set(), "{old}");
    }
}

#[test]
fn bound_flags_default_parse_and_are_checked_together() {
    let args = parse(&[]).unwrap();
    assert_eq!(args.max_sync_timeout, Duration::from_secs(3600));
    assert_eq!(args.min_sync_interval, Duration::from_secs(60));
    assert!(!args.allow_privileged_runners);
    assert_eq!(args.check(), Ok(()));
    for on in [
        &["--allow-privileged-runners"][..],
        &["--allow-privileged-runners=true"],
    ] {
        assert!(parse(on).unwrap().allow_privileged_runners, "{on:?}");
    }
    assert!(
        !parse(&["--allow-privileged-runners=false"])
            .unwrap()
            .allow_privileged_runners
    );
    let args = parse(&["--max-sync-timeout=8760h", "--min-sync-interval=1s"]).unwrap();
    assert_eq!(args.check(), Ok(()));
    for (flags, problem) in [
        (
            &["--max-sync-timeout=8761h"][..],
            "--max-sync-timeout 8761h must lie between 1s and 8760h",
        ),
        (
            &["--min-sync-interval=0s"],
            "--min-sync-interval 0s must lie between 1s and 8760h",
        ),
        (
            &["--sync-timeout=2h"],
            "--sync-timeout 2h must lie between 1s and --max-sync-timeout (1h)",
        ),
        (
            &["--max-sync-timeout=1m"],
            "--sync-timeout 5m must lie between 1s and --max-sync-timeout (1m)",
        ),
        (
            &["--retry-delay=9000h"],
            "--retry-delay 9000h must be at most 8760h",
        ),
    ] {
        assert_eq!(
            parse(flags).unwrap().check(),
            Err(problem.into()),
            "{flags:?}"
        );
    }
}

#[test]
fn namespaces_are_trimmed_and_deduplicated() {
    let given: Vec<String> = ["a", " b", "a", "", " ", "b "]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(distinct_names(&given), ["a", "b"]);
}

#[test]
fn the_interval_jitter_is_a_percentage() {
    assert_eq!(parse_percent("10%"), Ok(10));
    assert_eq!(parse_percent(" 0 "), Ok(0));
    assert_eq!(parse_percent("100"), Ok(100));
    for bad in ["101%", "-1", "ten", "%", "0.5"] {
        let e = parse_percent(bad).unwrap_err();
        assert!(e.contains("is not a percentage"), "{bad}: {e}");
    }
}

#[test]
fn each_shard_has_its_own_lease() {
    let base = "rancheros-operator";
    assert_eq!(shard_lease(base, None), base);
    let a = shard_lease(base, Some("shard=a"));
    let b = shard_lease(base, Some("shard=b"));
    assert!(
        a.starts_with("rancheros-operator-shard-") && a.len() == base.len() + 15,
        "{a}"
    );
    assert_ne!(a, b);
    // The same selector, the same Lease: every replica of a shard competes for one.
    assert_eq!(a, shard_lease(base, Some("shard=a")));
    // Within a Lease name's 253 characters, whatever the base.
    assert!(shard_lease(&"x".repeat(300), Some("s")).len() <= 253);
}
