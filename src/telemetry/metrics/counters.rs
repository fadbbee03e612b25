//! Counters a component keeps in its own atomics, read at scrape time: the [`CounterSource`]
//! trait each component implements next to its counters (its families are its own), the slot
//! one registered handle lives in (carrying a replaced handle's counts over), and their
//! encoding (one descriptor per family, even when several components report into it).

use std::any::Any;
use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

/// One counter family: its OpenMetrics name without `_total` (the encoder appends it) and its
/// help text.
#[derive(Debug)]
pub struct CounterFamily {
    /// `haptic_<component>_<noun>` (or upstream HAPTIC's name), without `_total`.
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
}

/// `haptic_retries_total{component}`: one family several components report into (each its
/// own `component` series).
pub static RETRIES: CounterFamily = CounterFamily {
    name: "haptic_retries",
    help: "Retries, by component (publisher: failed API attempts retried; scheduler: \
           deployments cancelled at their timeout)",
};

/// One series of a counter family: the family and its one label, if any.
#[derive(Clone, Copy, Debug)]
pub struct Series {
    /// The family.
    pub family: &'static CounterFamily,
    /// The series' label (`(key, value)`, a bounded value); `None` for an unlabelled family.
    pub label: Option<(&'static str, &'static str)>,
}

impl Series {
    /// The one series of an unlabelled family.
    #[must_use]
    pub const fn of(family: &'static CounterFamily) -> Series {
        Series {
            family,
            label: None,
        }
    }

    /// The series `key="value"` of `family`.
    #[must_use]
    pub const fn labelled(
        family: &'static CounterFamily,
        key: &'static str,
        value: &'static str,
    ) -> Series {
        Series {
            family,
            label: Some((key, value)),
        }
    }
}

/// A handle whose counters a scrape reads: a component implements it beside its counters and
/// registers the handle ([`super::Metrics::register`]); a new handle (a new term's component)
/// replaces the old one and the old one's counts are carried over, so every `_total` stays
/// monotonic for the process's life.
pub trait CounterSource: Clone + Send + Sync + 'static {
    /// Every series the handle reports, in exposition order (a family's series together).
    const SERIES: &'static [Series];

    /// The current values, one per entry of [`Self::SERIES`], in the same order. Atomic loads
    /// only: it runs under the slot's lock at every scrape.
    fn read(&self) -> Vec<u64>;

    /// Whether `other` is this same handle (registered again: nothing is carried over).
    fn same(&self, other: &Self) -> bool;
}

/// Adds `b` into `a`, element by element (saturating).
pub(super) fn add(a: &mut [u64], b: &[u64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

/// One registered handle plus the counts of the handles it replaced.
pub(super) struct Slot<T: CounterSource> {
    current: Option<T>,
    /// One value per series of `T::SERIES`.
    carried: Vec<u64>,
}

impl<T: CounterSource> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            current: None,
            carried: vec![0; T::SERIES.len()],
        }
    }
}

impl<T: CounterSource> Slot<T> {
    /// Installs `new`; a different old handle's last values move into `carried`. Increments
    /// the old handle makes after this (a draining component) are not counted.
    pub(super) fn replace(&mut self, new: T) {
        if let Some(old) = self.current.take()
            && !old.same(&new)
        {
            add(&mut self.carried, &old.read());
        }
        self.current = Some(new);
    }

    /// Whether a handle is registered.
    pub(super) fn is_registered(&self) -> bool {
        self.current.is_some()
    }

    /// The current handle (cloned, so the caller may read it without the lock).
    pub(super) fn current(&self) -> Option<T> {
        self.current.clone()
    }

    /// The counts carried over from replaced handles.
    pub(super) fn carried(&self) -> Vec<u64> {
        self.carried.clone()
    }

    /// The values to report: the current handle's (0 without one) plus the carried ones.
    pub(super) fn totals(&self) -> Vec<u64> {
        let mut out = self
            .current
            .as_ref()
            .map_or_else(|| vec![0; T::SERIES.len()], CounterSource::read);
        out.resize(T::SERIES.len(), 0);
        add(&mut out, &self.carried);
        out
    }
}

/// A [`Slot`] of any source type, as the component list holds it.
pub(super) trait AnySlot: Send {
    /// The series of the source type.
    fn series(&self) -> &'static [Series];
    /// [`Slot::totals`].
    fn totals(&self) -> Vec<u64>;
    /// Whether a handle is registered.
    fn is_registered(&self) -> bool;
    /// For registration: the concrete slot.
    fn as_any(&mut self) -> &mut dyn Any;
}

impl<T: CounterSource> AnySlot for Slot<T> {
    fn series(&self) -> &'static [Series] {
        T::SERIES
    }
    fn totals(&self) -> Vec<u64> {
        Slot::totals(self)
    }
    fn is_registered(&self) -> bool {
        Slot::is_registered(self)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Finds the slot of `T` in `slots`, adding an empty one (its families at 0) when absent.
pub(super) fn slot_of<T: CounterSource>(slots: &mut Vec<Box<dyn AnySlot>>) -> &mut Slot<T> {
    let at = slots
        .iter_mut()
        .position(|s| s.as_any().is::<Slot<T>>())
        .unwrap_or_else(|| {
            slots.push(Box::new(Slot::<T>::default()));
            slots.len() - 1
        });
    slots[at]
        .as_any()
        .downcast_mut::<Slot<T>>()
        .unwrap_or_else(|| unreachable!("the slot at {at} is a Slot<T>"))
}

/// Encodes `series` with their `values` (same order): one descriptor per family, in the order
/// of its first series, its series in the order given.
pub(super) fn encode(
    enc: &mut DescriptorEncoder<'_>,
    series: &[Series],
    values: &[u64],
) -> fmt::Result {
    let mut families: Vec<&'static CounterFamily> = Vec::new();
    for s in series {
        if !families.iter().any(|f| f.name == s.family.name) {
            families.push(s.family);
        }
    }
    for family in families {
        let of_family: Vec<(Option<(&str, &str)>, u64)> = series
            .iter()
            .zip(values)
            .filter(|(s, _)| s.family.name == family.name)
            .map(|(s, v)| (s.label, *v))
            .collect();
        let descriptor =
            enc.encode_descriptor(family.name, family.help, None, MetricType::Counter)?;
        if let [(None, value)] = of_family.as_slice() {
            ConstCounter::new(*value).encode(descriptor)?;
            continue;
        }
        let mut m = descriptor;
        for (label, value) in &of_family {
            let labels: Vec<(&str, &str)> = label.iter().copied().collect();
            ConstCounter::new(*value).encode(m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}
