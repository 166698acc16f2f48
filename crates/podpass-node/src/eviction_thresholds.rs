//! Eviction signals and hard thresholds (kubelet: `pkg/kubelet/eviction/api` and
//! `ParseThresholdConfig`): what `evictionHard` of a KubeletConfiguration (or the kubelet's
//! `--eviction-hard memory.available<100Mi,nodefs.available<10%`) says, parsed with
//! upstream's rules and defaults.

use std::collections::BTreeMap;

use podpass_api::quantity::{format_binary_si, format_decimal_si};

/// An eviction signal the node observes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `memory.available`.
    MemoryAvailable,
    /// `nodefs.available`: the filesystem of the node's root directory.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`: the filesystem holding the runtime's images.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `pid.available`.
    PidAvailable,
}

impl Signal {
    /// Every signal, in upstream's names.
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The signal's name (`nodefs.available`).
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The resource the signal starves (kubelet `signalToResource`): `memory`,
    /// `ephemeral-storage`, `inodes` or `pids`.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// The node condition a met threshold of the signal reports (kubelet
    /// `signalToNodeCondition`).
    pub fn condition(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "MemoryPressure",
            Signal::PidAvailable => "PIDPressure",
            _ => "DiskPressure",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What a threshold compares the observed availability with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThresholdValue {
    /// An amount (bytes, inodes or pids), and whether it was written with a binary suffix
    /// (`100Mi`: printed BinarySI, as a parsed quantity keeps its format; else DecimalSI).
    Quantity(u64, bool),
    /// A share of the capacity, in millionths (10% is 100 000).
    Percentage(u32),
}

/// One hard threshold: the signal is met when what is available is below the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threshold {
    /// The signal.
    pub signal: Signal,
    /// `<` this.
    pub value: ThresholdValue,
}

impl Threshold {
    /// The threshold as an amount of a `capacity` (kubelet `GetThresholdQuantity`: a
    /// percentage of it, rounded down).
    pub fn quantity(&self, capacity: u64) -> u64 {
        match self.value {
            ThresholdValue::Quantity(q, _) => q,
            ThresholdValue::Percentage(p) => {
                u64::try_from(u128::from(capacity) * u128::from(p) / 1_000_000).unwrap_or(u64::MAX)
            }
        }
    }

    /// Whether `available` of `capacity` meets it (strictly below, as upstream's `OpLessThan`).
    pub fn met(&self, available: u64, capacity: u64) -> bool {
        available < self.quantity(capacity)
    }
}

impl Threshold {
    /// The threshold's quantity of `capacity` as the kubelet prints it in an eviction
    /// message (`GetThresholdQuantity`: a percentage's amount is BinarySI, a quantity keeps
    /// its own format).
    pub fn printed(&self, capacity: u64) -> String {
        match self.value {
            ThresholdValue::Quantity(q, false) => format_decimal_si(q),
            _ => format_binary_si(self.quantity(capacity)),
        }
    }
}

/// The kubelet's default `evictionHard` on Linux (`DefaultEvictionHard`).
pub fn default_eviction_hard() -> Vec<Threshold> {
    let p = |signal, share| Threshold { signal, value: ThresholdValue::Percentage(share) };
    vec![
        Threshold { signal: Signal::MemoryAvailable, value: ThresholdValue::Quantity(100 << 20, true) },
        p(Signal::NodeFsAvailable, 100_000),
        p(Signal::NodeFsInodesFree, 50_000),
        p(Signal::ImageFsAvailable, 150_000),
        p(Signal::ImageFsInodesFree, 50_000),
    ]
}

/// A node's hard thresholds, upstream's defaults unless configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardThresholds(pub Vec<Threshold>);

impl Default for HardThresholds {
    fn default() -> Self {
        Self(default_eviction_hard())
    }
}

impl HardThresholds {
    /// What the threshold of `signal` holds back of `capacity` (kubelet
    /// `hardEvictionReservation`): none without one.
    pub fn held(&self, signal: Signal, capacity: u64) -> u64 {
        self.0.iter().find(|t| t.signal == signal).map_or(0, |t| t.quantity(capacity).min(capacity))
    }
}

/// Parses an `evictionHard` map (signal → `100Mi` or `10%`) as the kubelet's
/// `parseThresholdStatements`: an unknown signal, a negative or zero quantity, a percentage
/// outside 0–100 are errors naming the signal; `0%` and `100%` set no threshold. Every
/// problem is reported.
pub fn parse_eviction_hard(map: &BTreeMap<String, String>) -> Result<Vec<Threshold>, Vec<String>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (name, value) in map {
        let Some(signal) = Signal::parse(name) else {
            errors.push(format!("evictionHard: unsupported eviction signal {name}"));
            continue;
        };
        let value = value.trim();
        if let Some(number) = value.strip_suffix('%') {
            if value == "0%" || value == "100%" {
                continue;
            }
            match number.parse::<f64>() {
                Ok(p) if p.is_finite() && p < 0.0 => {
                    errors.push(format!("evictionHard: eviction percentage threshold {name} must be >= 0%: {value}"))
                }
                Ok(p) if p.is_finite() && p > 100.0 => {
                    errors.push(format!("evictionHard: eviction percentage threshold {name} must be <= 100%: {value}"))
                }
                Ok(p) if p.is_finite() => {
                    // Millionths of the capacity: 10% is 100 000.
                    let millionths = (p * 10_000.0).round() as u32;
                    if millionths > 0 {
                        out.push(Threshold { signal, value: ThresholdValue::Percentage(millionths) });
                    }
                }
                _ => errors.push(format!("evictionHard[{name}]: invalid percentage {value:?}")),
            }
            continue;
        }
        match podpass_api::quantity::parse_milli(value) {
            Ok(milli) if milli > 0 => {
                let whole = u64::try_from(milli.div_euclid(1000)).unwrap_or(u64::MAX);
                let binary = value.ends_with('i');
                out.push(Threshold { signal, value: ThresholdValue::Quantity(whole, binary) });
            }
            Ok(_) => errors.push(format!("evictionHard: eviction threshold {name} must be positive: {value}")),
            Err(e) => errors.push(format!("evictionHard[{name}]: {value:?}: {e}")),
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// A statement of `--eviction-hard` that is not `signal<value` (the message is cliflag's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed pair, expect string<string: {0:?}")]
pub struct MalformedPair(pub String);

/// Reads the kubelet's `--eviction-hard` flag form (`memory.available<100Mi,nodefs.available<10%`,
/// its `LangleSeparatedMapStringString`) into the `evictionHard` map.
pub fn parse_flag(text: &str) -> Result<BTreeMap<String, String>, MalformedPair> {
    let mut map = BTreeMap::new();
    for statement in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((signal, value)) = statement.split_once('<') else {
            return Err(MalformedPair(statement.to_owned()));
        };
        map.insert(signal.trim().to_owned(), value.trim().to_owned());
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn thresholds_parse_as_the_kubelets_and_name_their_signal() {
        let t = parse_eviction_hard(&map(&[("nodefs.inodesFree", "5%"), ("memory.available", "1Gi")])).unwrap();
        assert_eq!(
            t,
            vec![
                Threshold { signal: Signal::MemoryAvailable, value: ThresholdValue::Quantity(1 << 30, true) },
                Threshold { signal: Signal::NodeFsInodesFree, value: ThresholdValue::Percentage(50_000) },
            ]
        );
        assert!(
            parse_eviction_hard(&map(&[("imagefs.available", "0%"), ("nodefs.available", "100%")])).unwrap().is_empty()
        );
        let errors = parse_eviction_hard(&map(&[
            ("disk.available", "1Gi"),
            ("memory.available", "-1Mi"),
            ("nodefs.available", "120%"),
            ("nodefs.inodesFree", "lots"),
        ]))
        .unwrap_err();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert_eq!(errors[0], "evictionHard: unsupported eviction signal disk.available");
        assert_eq!(errors[1], "evictionHard: eviction threshold memory.available must be positive: -1Mi");
        assert_eq!(errors[2], "evictionHard: eviction percentage threshold nodefs.available must be <= 100%: 120%");
        assert!(errors[3].starts_with("evictionHard[nodefs.inodesFree]"), "{errors:?}");
    }

    #[test]
    fn a_threshold_is_met_strictly_below_its_quantity() {
        let ten = Threshold { signal: Signal::NodeFsAvailable, value: ThresholdValue::Percentage(100_000) };
        assert_eq!(ten.quantity(1000), 100);
        assert!(ten.met(99, 1000) && !ten.met(100, 1000));
        let mi = Threshold { signal: Signal::MemoryAvailable, value: ThresholdValue::Quantity(100 << 20, true) };
        assert!(mi.met((100 << 20) - 1, 0) && !mi.met(100 << 20, 0));
        assert_eq!(default_eviction_hard().len(), 5);
        assert_eq!(Signal::ImageFsInodesFree.resource(), "inodes");
        assert_eq!(Signal::NodeFsAvailable.condition(), "DiskPressure");
    }

    #[test]
    fn thresholds_print_as_their_resource_quantity_does() {
        let inodes = Threshold { signal: Signal::NodeFsInodesFree, value: ThresholdValue::Quantity(5000, false) };
        assert_eq!(inodes.printed(0), "5k");
        let share = Threshold { signal: Signal::NodeFsAvailable, value: ThresholdValue::Percentage(100_000) };
        assert_eq!(share.printed(10 << 30), "1Gi");
    }

    #[test]
    fn the_flag_form_is_langle_separated() {
        assert_eq!(
            parse_flag("memory.available<100Mi, nodefs.available<10%").unwrap(),
            map(&[("memory.available", "100Mi"), ("nodefs.available", "10%")])
        );
        assert!(parse_flag("memory.available=1Gi").is_err());
        assert!(parse_flag("").unwrap().is_empty());
    }
}
