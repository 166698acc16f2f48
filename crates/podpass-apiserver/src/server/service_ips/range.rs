//! `--service-cluster-ip-range` as kube-apiserver's IP allocator sees it
//! (pkg/registry/core/service/ipallocator): the usable addresses (neither the network's
//! `.0` nor its broadcast address), split by KEP-3070 into a lower band kept for static
//! allocation and an upper band that dynamic allocation tries first.

use std::net::Ipv4Addr;

/// `--service-cluster-ip-range` refused, worded for the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceRangeError {
    /// No `/`.
    #[error("{0:?}: must be a CIDR such as 10.96.0.0/12")]
    NotCidr(String),
    /// Not IPv4.
    #[error("{0:?}: only an IPv4 range is served (e.g. 10.96.0.0/12)")]
    NotIpv4(String),
    /// The prefix length is no number.
    #[error("{0:?}: the prefix length must be a number")]
    PrefixNotNumber(String),
    /// The prefix length is out of range.
    #[error("{0:?}: the prefix length must be between 8 and 30")]
    PrefixOutOfRange(String),
    /// Host bits set.
    #[error("{cidr:?}: the address has bits set past the prefix (the range starts at {start})")]
    HostBits {
        /// The flag's value.
        cidr: String,
        /// The network address it meant.
        start: Ipv4Addr,
    },
    /// Loopback or unspecified.
    #[error("{0:?}: the range may not be loopback or unspecified")]
    Reserved(String),
}

/// The default range (`10.96.0.0/12`, kube-apiserver's).
pub const DEFAULT_RANGE: ServiceIpRange = ServiceIpRange { network: Ipv4Addr::new(10, 96, 0, 0), bits: 12 };

/// An IPv4 service range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceIpRange {
    network: Ipv4Addr,
    bits: u32,
}

impl std::fmt::Display for ServiceIpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.bits)
    }
}

impl ServiceIpRange {
    /// Parses a CIDR such as `10.96.0.0/12`.
    pub fn parse(cidr: &str) -> Result<Self, ServiceRangeError> {
        let owned = || cidr.to_owned();
        let (network, bits) = cidr.split_once('/').ok_or_else(|| ServiceRangeError::NotCidr(owned()))?;
        let network: Ipv4Addr = network.parse().map_err(|_| ServiceRangeError::NotIpv4(owned()))?;
        let bits: u32 = bits.parse().map_err(|_| ServiceRangeError::PrefixNotNumber(owned()))?;
        if !(8..=30).contains(&bits) {
            return Err(ServiceRangeError::PrefixOutOfRange(owned()));
        }
        let mask = u32::MAX << (32 - bits);
        if u32::from(network) & !mask != 0 {
            return Err(ServiceRangeError::HostBits {
                cidr: owned(),
                start: Ipv4Addr::from(u32::from(network) & mask),
            });
        }
        if network.is_loopback() || network.is_unspecified() {
            return Err(ServiceRangeError::Reserved(owned()));
        }
        Ok(ServiceIpRange { network, bits })
    }

    /// The network address (`10.96.0.0`): what a dry-run dynamic allocation answers, as
    /// upstream's (`a.CIDR().IP`).
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The first usable address (`10.96.0.1`), the `kubernetes` Service's.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    /// The last usable address (the one before the broadcast address).
    pub fn last(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + self.addresses() - 2)
    }

    /// All addresses of the CIDR, network and broadcast included (`RangeSize`).
    fn addresses(&self) -> u32 {
        1 << (32 - self.bits)
    }

    /// The usable addresses (`hostsPerNetwork`).
    pub fn size(&self) -> u32 {
        self.addresses() - 2
    }

    /// How many of the first usable addresses form the static band
    /// (`calculateRangeOffset`: `min(max(16, size/16), 256)`, none for a range of 16 or
    /// fewer).
    pub fn static_band(&self) -> u32 {
        let size = self.addresses();
        if size <= 16 { 0 } else { (size / 16).clamp(16, 256) }
    }

    /// Whether `ip` is a usable address of the range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.first()..=self.last()).contains(&ip)
    }

    /// The addresses a dynamic allocation tries, in upstream's order: the upper band from
    /// the `upper`-th address of it, wrapping, then the static band from its `lower`-th
    /// (both taken modulo the band's size; callers pass random numbers).
    pub fn candidates(&self, upper: u32, lower: u32) -> impl Iterator<Item = Ipv4Addr> + use<> {
        let first = u32::from(self.first());
        let band = self.static_band();
        let upper_size = self.size() - band;
        let in_band = |start: u32, size: u32, from: u32| {
            let from = if size == 0 { 0 } else { from % size };
            (0..size).map(move |i| Ipv4Addr::from(start + (from + i) % size))
        };
        in_band(first + band, upper_size, upper).chain(in_band(first, band, lower))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_range_is_parsed_and_refused_in_the_flags_words() {
        let range = ServiceIpRange::parse("10.96.0.0/12").unwrap();
        assert_eq!(range.to_string(), "10.96.0.0/12");
        assert_eq!(range.first(), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(range.last(), Ipv4Addr::new(10, 111, 255, 254));
        assert_eq!(ServiceIpRange::parse("10.0.0.0/24").unwrap().first(), Ipv4Addr::new(10, 0, 0, 1));
        let refused = |cidr: &str| ServiceIpRange::parse(cidr).unwrap_err().to_string();
        assert!(refused("10.96.0.1/12").contains("starts at 10.96.0.0"));
        assert!(refused("fd00::/108").contains("IPv4"));
        assert!(refused("10.96.0.0").contains("CIDR"));
        assert!(refused("10.96.0.0/31").contains("between 8 and 30"));
        assert!(refused("127.0.0.0/8").contains("loopback"));
    }

    #[test]
    fn the_static_band_follows_kep_3070() {
        let band = |cidr: &str| ServiceIpRange::parse(cidr).unwrap().static_band();
        // min(max(16, size/16), 256) on the whole CIDR's size; none for 16 or fewer.
        assert_eq!(band("10.0.0.0/28"), 0);
        assert_eq!(band("10.0.0.0/27"), 16);
        assert_eq!(band("10.0.0.0/24"), 16);
        assert_eq!(band("10.0.0.0/20"), 256);
        assert_eq!(band("10.96.0.0/12"), 256);
        let range = ServiceIpRange::parse("10.96.0.0/12").unwrap();
        assert!(range.contains(range.first()) && range.contains(range.last()));
        assert!(!range.contains(range.network()) && !range.contains(Ipv4Addr::new(10, 111, 255, 255)));
        assert!(!range.contains(Ipv4Addr::new(10, 112, 0, 1)));
    }

    #[test]
    fn dynamic_candidates_try_the_upper_band_then_the_static_one_each_address_once() {
        let range = ServiceIpRange::parse("10.0.0.0/27").unwrap();
        let all: Vec<Ipv4Addr> = range.candidates(5, 3).collect();
        assert_eq!(all.len(), 30, "every usable address once");
        // The upper band (.17–.30) first, from its 5th address, wrapping.
        assert_eq!(all[0], Ipv4Addr::new(10, 0, 0, 22));
        assert_eq!(all[8], Ipv4Addr::new(10, 0, 0, 30));
        assert_eq!(all[9], Ipv4Addr::new(10, 0, 0, 17));
        // Then the static band (.1–.16) from its 3rd.
        assert_eq!(all[14], Ipv4Addr::new(10, 0, 0, 4));
        assert_eq!(*all.last().unwrap(), Ipv4Addr::new(10, 0, 0, 3));
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 30);
        // A range too small for a static band is one band.
        let small: Vec<Ipv4Addr> = ServiceIpRange::parse("10.0.0.0/29").unwrap().candidates(u32::MAX, 0).collect();
        assert_eq!(small.len(), 6);
    }
}
