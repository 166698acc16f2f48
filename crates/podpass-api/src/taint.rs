//! Taints and tolerations as core/v1 decides them (`Toleration.ToleratesTaint`), shared by
//! the scheduler's TaintToleration filter and the node's admission under pressure, whatever
//! form each holds its pods in.

/// A toleration's four fields, as written (empty when unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Toleration<'a> {
    /// `key` (empty with `Exists`: every key).
    pub key: &'a str,
    /// `operator`: `Equal` (the default, also when empty) or `Exists`.
    pub operator: &'a str,
    /// `value`, compared under `Equal`.
    pub value: &'a str,
    /// `effect` (empty: every effect).
    pub effect: &'a str,
}

/// A taint's key, value and effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taint<'a> {
    /// `key`.
    pub key: &'a str,
    /// `value`.
    pub value: &'a str,
    /// `effect`: `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: &'a str,
}

impl Toleration<'_> {
    /// `ToleratesTaint`: the effect matches (or the toleration names none), the key matches
    /// (or it names none), and under `Equal` the values are equal; `Exists` needs no
    /// value. An operator upstream does not know tolerates nothing.
    pub fn tolerates(&self, taint: &Taint<'_>) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_match_taints_as_upstream() {
        let pressure = Taint { key: "node.kubernetes.io/memory-pressure", value: "", effect: "NoSchedule" };
        let exists = Toleration { key: pressure.key, operator: "Exists", ..Default::default() };
        assert!(exists.tolerates(&pressure));
        assert!(Toleration { operator: "Exists", ..Default::default() }.tolerates(&pressure), "everything");
        let other_effect = Toleration { effect: "NoExecute", ..exists };
        assert!(!other_effect.tolerates(&pressure));
        let dedicated = Taint { key: "dedicated", value: "team-a", effect: "NoSchedule" };
        let equal = Toleration { key: "dedicated", value: "team-a", ..Default::default() };
        assert!(equal.tolerates(&dedicated), "Equal is the default operator");
        assert!(!Toleration { value: "team-b", ..equal }.tolerates(&dedicated));
        assert!(!Toleration { operator: "Lt", ..equal }.tolerates(&dedicated));
        assert!(!exists.tolerates(&dedicated), "another key");
    }
}
