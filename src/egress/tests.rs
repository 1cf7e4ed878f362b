use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

#[test]
fn cidrs_parse_and_clear_host_bits() {
    assert_eq!(cidr("10.1.2.3/8").to_string(), "10.0.0.0/8");
    assert_eq!(cidr(" 10.0.0.0/8 ").to_string(), "10.0.0.0/8");
    assert_eq!(cidr("fd00::1/8").to_string(), "fd00::/8");
    assert_eq!(cidr("10.1.2.3").to_string(), "10.1.2.3/32");
    assert_eq!(cidr("::1").to_string(), "::1/128");
    assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
    assert_eq!(cidr("::/0").to_string(), "::/0");
    // IPv4-mapped networks are the IPv4 network.
    assert_eq!(cidr("::ffff:127.0.0.1/104").to_string(), "127.0.0.0/8");
    assert_eq!(cidr("::ffff:10.0.0.1").to_string(), "10.0.0.1/32");
    // Shorter than /96 it is an IPv6 network that holds more than mapped addresses.
    assert_eq!(cidr("::ffff:0.0.0.0/80").to_string(), "::/80");
}

#[test]
fn bad_cidrs_name_the_value() {
    for bad in [
        "",
        "/8",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "10.0.0.0/-1",
        "10.0.0/8",
        "localhost",
        "10.0.0.0/8/8",
        "fd00::/x",
        "10.0.0.0 /8",
    ] {
        let e = Cidr::from_str(bad).unwrap_err();
        assert!(e.contains(&format!("{bad:?} is not a CIDR")), "{bad}: {e}");
    }
    for (bad, bits) in [("10.0.0.0/33", 32), ("fd00::/129", 128), ("::/300", 128)] {
        let e = Cidr::from_str(bad).unwrap_err();
        assert!(
            e.contains(&format!("prefix length above {bits}")),
            "{bad}: {e}"
        );
    }
}

#[test]
fn cidrs_hold_their_addresses_only() {
    let net = cidr("10.0.0.0/8");
    assert!(net.contains(ip("10.0.0.0")));
    assert!(net.contains(ip("10.255.255.255")));
    assert!(!net.contains(ip("11.0.0.0")));
    assert!(!net.contains(ip("9.255.255.255")));
    assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
    assert!(!cidr("0.0.0.0/0").contains(ip("2001:db8::1")));
    assert!(cidr("1.2.3.4").contains(ip("1.2.3.4")));
    assert!(!cidr("1.2.3.4").contains(ip("1.2.3.5")));
    let v6 = cidr("fe80::/10");
    assert!(v6.contains(ip("fe80::1")));
    assert!(v6.contains(ip("febf:ffff::1")));
    assert!(!v6.contains(ip("fec0::1")));
    assert!(cidr("::/0").contains(ip("2001:db8::1")));
    assert!(!cidr("::/0").contains(ip("1.2.3.4")));
}

#[test]
fn v4_mapped_addresses_are_judged_as_ipv4() {
    assert!(cidr("127.0.0.0/8").contains(ip("::ffff:127.0.0.1")));
    assert!(cidr("169.254.0.0/16").contains(ip("::ffff:169.254.169.254")));
    assert!(!cidr("127.0.0.0/8").contains(ip("::ffff:10.0.0.1")));
    assert!(cidr("::ffff:127.0.0.0/104").contains(ip("127.0.0.2")));
    assert!(cidr("::ffff:127.0.0.0/104").contains(ip("::ffff:127.0.0.2")));
    // A mapped address is an IPv4 connection: IPv6 networks do not hold it.
    assert!(!cidr("::/0").contains(ip("::ffff:127.0.0.1")));
    let policy = Policy::default();
    assert_eq!(
        policy.check(ip("::ffff:127.0.0.1")),
        Err(Refused(ip("127.0.0.1")))
    );
    assert_eq!(
        policy
            .check(ip("::ffff:169.254.169.254"))
            .unwrap_err()
            .to_string(),
        "address 169.254.169.254 is not allowed (--json-deny-cidr)"
    );
    assert!(policy.check(ip("::ffff:192.0.2.2")).is_ok());
}

#[test]
fn ipv6_forms_of_an_ipv4_address_are_judged_by_the_ipv4_rule() {
    let policy = Policy::default();
    for (form, v4) in [
        ("::127.0.0.1", "127.0.0.1"),
        ("::169.254.169.254", "169.254.169.254"),
        ("::ffff:0:127.0.0.1", "127.0.0.1"),
        ("::ffff:0:a9fe:a9fe", "169.254.169.254"),
        ("64:ff9b::127.0.0.1", "127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("2002:7f00:1::", "127.0.0.1"),
        ("2002:a9fe:a9fe:1::5", "169.254.169.254"),
        ("2002:6464:64c8::", "100.100.100.200"),
    ] {
        assert_eq!(embedded_ipv4(ip(form)), Some(v4.parse().unwrap()), "{form}");
        assert_eq!(
            policy.check(ip(form)).unwrap_err().to_string(),
            format!("address {v4} is not allowed (--json-deny-cidr)"),
            "{form}"
        );
    }
    // :: and ::1 are IPv6's own unspecified and loopback addresses, refused as such.
    assert_eq!(embedded_ipv4(ip("::1")), None);
    assert!(policy.check(ip("::1")).is_err());
    // Public IPv4 behind each form, and plain IPv6, pass.
    for ok in [
        "::8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::1",
        "2001:db8::1",
    ] {
        assert!(policy.check(ip(ok)).is_ok(), "{ok}");
    }
    // An allow rule for the IPv4 network lets its forms through too.
    let allowed = Policy::new(vec![cidr("127.0.0.0/8")], vec![cidr("127.0.0.0/8")]);
    assert!(allowed.check(ip("64:ff9b::127.0.0.1")).is_ok());
}

#[test]
fn metadata_services_are_refused_by_default_and_private_ranges_on_request() {
    let policy = Policy::default();
    for refused in [
        "100.100.100.200",
        "fd00:ec2::254",
        "::ffff:100.100.100.200",
        "168.63.129.16",
        "::ffff:168.63.129.16",
        "64:ff9b:1::a9fe:a9fe",
        "64:ff9b:1:ffff::1",
    ] {
        assert!(policy.check(ip(refused)).is_err(), "{refused}");
    }
    for private in [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "fd12::1",
    ] {
        assert!(policy.check(ip(private)).is_ok(), "{private}");
        assert!(policy.withholds(ip(private)), "{private}");
        let strict = Policy::default().deny_private_ranges();
        assert!(strict.check(ip(private)).is_err(), "{private}");
    }
    assert!(!policy.withholds(ip("8.8.8.8")));
    let allowed = Policy::new(Vec::new(), vec![cidr("10.0.0.0/8")]);
    assert!(!allowed.withholds(ip("10.1.2.3")));
}

#[test]
fn the_default_policy_refuses_local_link_local_unspecified_and_multicast() {
    let policy = Policy::default();
    assert_eq!(
        policy.deny.len(),
        DEFAULT_DENY.len(),
        "a default did not parse"
    );
    for refused in [
        "127.0.0.1",
        "127.0.0.2",
        "127.255.255.255",
        "::1",
        "169.254.169.254",
        "169.254.0.1",
        "fe80::1",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "239.255.255.250",
        "ff02::1",
    ] {
        assert_eq!(
            policy.check(ip(refused)).unwrap_err().to_string(),
            format!("address {refused} is not allowed (--json-deny-cidr)")
        );
    }
    for allowed in [
        "192.0.2.2",
        "10.96.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "8.8.8.8",
        "128.0.0.1",
        "0.0.0.1",
        "169.255.0.1",
        "240.0.0.1",
        "2001:db8::1",
        "fd00::2",
        "::2",
    ] {
        assert_eq!(policy.check(ip(allowed)), Ok(()), "{allowed}");
    }
}

#[test]
fn allow_overrides_deny_for_what_it_lists_only() {
    let policy = Policy::new(
        vec![cidr("127.0.0.0/8"), cidr("10.0.0.0/8")],
        vec![cidr("127.0.0.2/32"), cidr("10.1.0.0/16")],
    );
    assert!(policy.check(ip("127.0.0.2")).is_ok());
    assert!(policy.check(ip("::ffff:127.0.0.2")).is_ok());
    assert!(policy.check(ip("10.1.2.3")).is_ok());
    assert!(policy.check(ip("127.0.0.1")).is_err());
    assert!(policy.check(ip("10.2.0.1")).is_err());
    // Allowing what is not denied changes nothing.
    assert!(policy.check(ip("192.0.2.2")).is_ok());
    // An empty deny list refuses nothing.
    assert!(Policy::new(vec![], vec![]).check(ip("127.0.0.1")).is_ok());
}

#[test]
fn ip_literal_hosts_are_checked_and_names_left_to_the_resolver() {
    let policy = Policy::default();
    assert_eq!(
        policy.check_host("127.0.0.1"),
        Err(Refused(ip("127.0.0.1")))
    );
    assert_eq!(policy.check_host("[::1]"), Err(Refused(ip("::1"))));
    assert_eq!(
        policy.check_host("[::ffff:169.254.169.254]"),
        Err(Refused(ip("169.254.169.254")))
    );
    assert_eq!(policy.check_host("192.0.2.2"), Ok(()));
    assert_eq!(policy.check_host("[2001:db8::1]"), Ok(()));
    assert_eq!(policy.check_host("localhost"), Ok(()));
    assert_eq!(policy.check_host("example.com"), Ok(()));
}

#[test]
fn filtering_keeps_the_allowed_addresses_or_refuses_the_first() {
    let policy = Policy::default();
    let mixed = [
        ip("127.0.0.1"),
        ip("192.0.2.2"),
        ip("::1"),
        ip("2001:db8::1"),
    ];
    assert_eq!(
        policy.filter(&mixed),
        Ok(vec![ip("192.0.2.2"), ip("2001:db8::1")])
    );
    assert_eq!(
        policy.filter(&[ip("::1"), ip("127.0.0.1")]),
        Err(Refused(ip("::1")))
    );
    assert_eq!(
        policy.filter(&[ip("::ffff:127.0.0.1"), ip("::1")]),
        Err(Refused(ip("127.0.0.1")))
    );
    assert_eq!(policy.filter(&[]), Ok(vec![]));
}
