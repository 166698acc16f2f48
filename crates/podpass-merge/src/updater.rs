//! Ownership of fields across managers (upstream `merge.Updater`): what an update takes
//! from other managers, and what an apply merges, removes and conflicts with.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::path::Path;
use crate::schema::{Schema, TypeId};
use crate::set::Set;
use crate::typed::{self, Duplicates, ValidationErrors};

/// The fields one manager owns, and in which API version (upstream `VersionedSet`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedSet {
    /// The owned paths.
    pub set: Set,
    /// The version the paths are in (`apps/v1`).
    pub api_version: String,
    /// Whether the manager applied them (an `Apply` entry) or updated them (`Update`).
    pub applied: bool,
}

/// Every manager's fields, by manager identifier (upstream `ManagedFields`).
pub type ManagedFields = BTreeMap<String, VersionedSet>;

/// One field an apply would take from another manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager identifier that owns it.
    pub manager: String,
    /// The field.
    pub path: Path,
}

/// The fields an apply would take from other managers; sorted by manager, then path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "conflict with {:?}: {}", c.manager, c.path)?;
        }
        Ok(())
    }
}

impl Conflicts {
    fn from_managers(conflicts: &ManagedFields) -> Self {
        let mut out = Vec::new();
        for (manager, vs) in conflicts {
            out.extend(vs.set.paths().into_iter().map(|path| Conflict { manager: manager.clone(), path }));
        }
        Self(out)
    }

    /// The conflicting paths as a set.
    pub fn to_set(&self) -> Set {
        Set::from_paths(self.0.iter().map(|c| c.path.clone()))
    }
}

/// Why an apply or update could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// The applied configuration takes fields other managers own (and was not forced).
    #[error("{0}")]
    Conflicts(Conflicts),
    /// A value does not fit the schema.
    #[error("{0}")]
    Invalid(ValidationErrors),
}

impl From<ValidationErrors> for MergeError {
    fn from(e: ValidationErrors) -> Self {
        Self::Invalid(e)
    }
}

/// Computes ownership for one type of a schema.
#[derive(Debug, Clone, Copy)]
pub struct Updater<'s> {
    schema: &'s Schema,
    ty: TypeId,
    ignored: Option<&'s Set>,
}

impl<'s> Updater<'s> {
    /// An updater for values of type `ty`.
    pub fn new(schema: &'s Schema, ty: TypeId) -> Self {
        Self { schema, ty, ignored: None }
    }

    /// Fields nobody owns through this updater, and changes to them conflict with nobody
    /// (upstream `IgnoredFields`, the strategies' reset fields: `status` for writes to a
    /// main resource).
    pub fn ignoring(mut self, ignored: &'s Set) -> Self {
        self.ignored = Some(ignored);
        self
    }

    fn compare(&self, old: &Value, new: &Value) -> Result<typed::Comparison, ValidationErrors> {
        let mut c = typed::compare(self.schema, self.ty, old, new)?;
        if let Some(ignored) = self.ignored {
            c.added = c.added.recursive_difference(ignored);
            c.modified = c.modified.recursive_difference(ignored);
            c.removed = c.removed.recursive_difference(ignored);
        }
        Ok(c)
    }

    /// Takes from other managers what changed from `old` to `new`; with `force` false, a
    /// change to a field another manager owns is a conflict instead. Returns the comparison.
    fn take(
        &self,
        old: &Value,
        new: &Value,
        managers: &mut ManagedFields,
        workflow: &str,
        force: bool,
    ) -> Result<typed::Comparison, MergeError> {
        let compare = self.compare(old, new)?;
        let changed = compare.modified.union(&compare.added);
        let mut conflicts = ManagedFields::new();
        for (manager, vs) in managers.iter() {
            if manager == workflow {
                continue;
            }
            let taken = vs.set.intersection(&changed);
            if !taken.is_empty() {
                conflicts.insert(manager.clone(), VersionedSet { set: taken, ..vs.clone() });
            }
        }
        if !force && !conflicts.is_empty() {
            return Err(MergeError::Conflicts(Conflicts::from_managers(&conflicts)));
        }
        for (manager, vs) in managers.iter_mut() {
            if manager == workflow {
                continue;
            }
            if let Some(taken) = conflicts.get(manager) {
                vs.set = vs.set.difference(&taken.set);
            }
            if !compare.removed.is_empty() {
                vs.set = vs.set.difference(&compare.removed);
            }
        }
        managers.retain(|_, vs| !vs.set.is_empty());
        Ok(compare)
    }

    fn without_ignored(&self, set: Set) -> Set {
        match self.ignored {
            Some(ignored) => set.recursive_difference(ignored),
            None => set,
        }
    }

    /// Records a non-apply write (upstream `Update`): `manager` owns what it added or
    /// changed from `live` to `new` (besides what it owned and did not remove), and
    /// nobody else owns those any more.
    pub fn update(
        &self,
        live: &Value,
        new: &Value,
        version: &str,
        managers: &mut ManagedFields,
        manager: &str,
    ) -> Result<(), MergeError> {
        let compare = self.take(live, new, managers, manager, true)?;
        let previous = managers.remove(manager).map(|vs| vs.set).unwrap_or_default();
        let set = previous.difference(&compare.removed).union(&compare.modified).union(&compare.added);
        let set = self.without_ignored(set);
        if !set.is_empty() {
            managers.insert(manager.to_owned(), VersionedSet { set, api_version: version.to_owned(), applied: false });
        }
        Ok(())
    }

    /// Applies `config` for `manager` (upstream `Apply`): merges it into `live`, removes
    /// what `manager` applied last time and no longer does when nobody else owns it, and
    /// makes `manager` own exactly what `config` sets. Fields others own that the merge
    /// changes are conflicts unless `force`, which takes them. `Ok(None)`: the object is
    /// unchanged (ownership may still have changed).
    pub fn apply(
        &self,
        live: &Value,
        config: &Value,
        version: &str,
        managers: &mut ManagedFields,
        manager: &str,
        force: bool,
    ) -> Result<Option<Value>, MergeError> {
        let set = typed::to_field_set(self.schema, self.ty, config, Duplicates::Refuse)?;
        let merged = typed::merge(self.schema, self.ty, live, config)?;
        let mut next = managers.clone();
        let last = next.remove(manager);
        let set = self.without_ignored(set);
        next.insert(manager.to_owned(), VersionedSet { set, api_version: version.to_owned(), applied: true });
        let merged = match last {
            Some(last) if !last.set.is_empty() => self.prune(&merged, &next, &last.set)?,
            _ => merged,
        };
        self.take(live, &merged, &mut next, manager, force)?;
        *managers = next;
        Ok((!crate::value::equals(live, &merged)).then_some(merged))
    }

    /// Removes what the applier owned last time and no longer applies, unless another
    /// manager (or the new configuration) owns it (upstream `prune`, `addBackOwnedItems`,
    /// `addBackDanglingItems`).
    fn prune(&self, merged: &Value, managers: &ManagedFields, last: &Set) -> Result<Value, ValidationErrors> {
        let (schema, ty) = (self.schema, self.ty);
        let named = |s: &Set| s.ensure_named_fields_are_members(schema, ty);
        let last = named(last);
        let pruned = typed::remove_items(schema, ty, merged, &last);
        // Add back what anybody owns.
        let merged_set = named(&typed::to_field_set(schema, ty, merged, Duplicates::Tolerate)?);
        let pruned_set = named(&typed::to_field_set(schema, ty, &pruned, Duplicates::Tolerate)?);
        let managed = managers.values().fold(Set::new(), |acc, vs| acc.union(&vs.set));
        let keep = pruned_set.union(&named(&managed));
        let pruned = typed::remove_items(schema, ty, merged, &merged_set.difference(&keep));
        // Remove only what the applier owned last time.
        let pruned_set = named(&typed::to_field_set(schema, ty, &pruned, Duplicates::Tolerate)?);
        Ok(typed::remove_items(schema, ty, merged, &merged_set.difference(&pruned_set).intersection(&last)))
    }
}
