//! The egress flags, each under two names: `--egress-*`, and its old name `--json-*`,
//! hidden and still accepted, whose values add up with the new one's. The old name is an
//! arg of its own rather than a clap alias, because an alias cannot carry a second
//! environment variable; both args of a flag are made from its one entry here.

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};

use crate::egress::{self, Cidr};

/// What the egress flags say, both names of each taken together.
#[derive(Clone, Debug, Default)]
pub struct EgressFlags {
    deny_cidrs: Vec<Cidr>,
    allow_cidrs: Vec<Cidr>,
    deny_private_ranges: bool,
}

/// One flag under its new and its old name: each name's arg id, long name and
/// environment variable.
struct Renamed {
    new: [&'static str; 3],
    old: [&'static str; 3],
    /// A list of networks (repeatable, comma-separated) rather than a switch.
    cidrs: bool,
    help: &'static str,
}

const DENY_CIDRS: Renamed = Renamed {
    new: ["egress_deny_cidrs", "egress-deny-cidr", "EGRESS_DENY_CIDRS"],
    old: ["json_deny_cidrs", "json-deny-cidr", "JSON_DENY_CIDRS"],
    cidrs: true,
    help: "json channels (their URLs) and oci channels (their registries) may not connect to \
           addresses in this network (CIDR; repeatable; default: loopback, link-local, \
           unspecified, multicast and the cloud metadata services; giving it replaces that \
           list) unless --egress-allow-cidr lists them. Old name, still accepted: \
           --json-deny-cidr (JSON_DENY_CIDRS); the two lists add up",
};

const ALLOW_CIDRS: Renamed = Renamed {
    new: [
        "egress_allow_cidrs",
        "egress-allow-cidr",
        "EGRESS_ALLOW_CIDRS",
    ],
    old: ["json_allow_cidrs", "json-allow-cidr", "JSON_ALLOW_CIDRS"],
    cidrs: true,
    help: "Exceptions to --egress-deny-cidr (CIDR; repeatable). Old name, still accepted: \
           --json-allow-cidr (JSON_ALLOW_CIDRS)",
};

const DENY_PRIVATE_RANGES: Renamed = Renamed {
    new: [
        "egress_deny_private_ranges",
        "egress-deny-private-ranges",
        "EGRESS_DENY_PRIVATE_RANGES",
    ],
    old: [
        "json_deny_private_ranges",
        "json-deny-private-ranges",
        "JSON_DENY_PRIVATE_RANGES",
    ],
    cidrs: false,
    help: "Also deny the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) to \
           json and oci channels, on top of --egress-deny-cidr. Old name, still accepted: \
           --json-deny-private-ranges (JSON_DENY_PRIVATE_RANGES)",
};

/// In the order `--help` lists them.
const FLAGS: [&Renamed; 3] = [&DENY_CIDRS, &ALLOW_CIDRS, &DENY_PRIVATE_RANGES];

impl Renamed {
    /// The arg of the new name, or (`old`) of the old one, hidden.
    fn arg(&self, old: bool) -> Arg {
        let [id, long, env] = if old { self.old } else { self.new };
        let help = if old {
            format!("The old name of --{}", self.new[1])
        } else {
            self.help.to_string()
        };
        let arg = Arg::new(id).long(long).env(env).help(help).hide(old);
        if self.cidrs {
            arg.value_name("CIDR")
                .value_delimiter(',')
                .value_parser(egress::parse_cidr)
                .action(ArgAction::Append)
        } else {
            // (a switch shows no value name; this is the one clap's derive gave it)
            arg.value_name(env)
                .value_parser(clap::value_parser!(bool))
                .action(ArgAction::SetTrue)
        }
    }

    /// The networks both names list, the new name's first.
    fn cidrs(&self, matches: &ArgMatches) -> Result<Vec<Cidr>, clap::Error> {
        let mut out = Vec::new();
        for id in [self.new[0], self.old[0]] {
            out.extend(
                matches
                    .try_get_many::<Cidr>(id)
                    .map_err(mismatch)?
                    .into_iter()
                    .flatten(),
            );
        }
        Ok(out)
    }

    /// Whether either name is given.
    fn set(&self, matches: &ArgMatches) -> Result<bool, clap::Error> {
        let mut on = false;
        for id in [self.new[0], self.old[0]] {
            on |= matches.try_get_one::<bool>(id).map_err(mismatch)? == Some(&true);
        }
        Ok(on)
    }
}

/// An arg read as another type than it was defined with: a defect of this file, said as
/// an error rather than a panic.
fn mismatch(e: clap::parser::MatchesError) -> clap::Error {
    clap::Error::raw(clap::error::ErrorKind::InvalidValue, e)
}

impl FromArgMatches for EgressFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(EgressFlags {
            deny_cidrs: DENY_CIDRS.cidrs(matches)?,
            allow_cidrs: ALLOW_CIDRS.cidrs(matches)?,
            deny_private_ranges: DENY_PRIVATE_RANGES.set(matches)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for EgressFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        FLAGS.iter().fold(cmd, |cmd, flag| {
            cmd.arg(flag.arg(false)).arg(flag.arg(true))
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl EgressFlags {
    /// The networks channels may not connect to: both names' lists together, or the
    /// default list when neither is given.
    pub fn deny_cidrs(&self) -> Vec<Cidr> {
        if self.deny_cidrs.is_empty() {
            egress::default_deny()
        } else {
            self.deny_cidrs.clone()
        }
    }

    /// The exceptions to [`Self::deny_cidrs`], from both names.
    pub fn allow_cidrs(&self) -> Vec<Cidr> {
        self.allow_cidrs.clone()
    }

    /// The egress policy of json and oci channels these flags set.
    pub fn policy(&self) -> egress::Policy {
        let policy = egress::Policy::new(self.deny_cidrs(), self.allow_cidrs());
        if self.deny_private_ranges {
            policy.deny_private_ranges()
        } else {
            policy
        }
    }
}
