//! Which GPUs a rank samples: the devices its process uses, matched to NVML
//! devices by UUID or PCI bus id, never by assuming that CUDA's and NVML's
//! indices agree.
//!
//! CUDA numbers devices in PCI bus order when `CUDA_DEVICE_ORDER=PCI_BUS_ID`
//! (and, on nodes of one GPU model, in its default order too); an index in
//! `CUDA_VISIBLE_DEVICES` is therefore resolved against the devices sorted
//! by PCI bus id. A UUID is exact and preferred.

/// A GPU as NVML enumerates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    /// NVML index.
    pub index: u32,
    /// UUID, e.g. `GPU-8f3c...`.
    pub uuid: String,
    /// PCI bus id, e.g. `00000000:3B:00.0`.
    pub pci_bus_id: String,
}

/// The devices chosen and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// NVML indices of the chosen devices.
    pub indices: Vec<u32>,
    /// How they were chosen, for the report.
    pub how: String,
}

/// A device list that names something the machine does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// An entry matches no device.
    #[error("{origin} entry `{entry}` matches no GPU (devices: {known})")]
    NoMatch {
        /// `gpu_devices` or `CUDA_VISIBLE_DEVICES`.
        origin: &'static str,
        /// The entry.
        entry: String,
        /// The devices there are.
        known: String,
    },
    /// MIG instances are named.
    #[error("{origin} names the MIG instance `{entry}`; MIG instances cannot be sampled: set gpu_devices to the parent GPU's UUID")]
    Mig {
        /// `gpu_devices` or `CUDA_VISIBLE_DEVICES`.
        origin: &'static str,
        /// The entry.
        entry: String,
    },
    /// No device for this rank's local rank.
    #[error("LOCAL_RANK {local_rank} has no GPU of its own: the node has {count} (set gpu_devices or CUDA_VISIBLE_DEVICES)")]
    NoDeviceForLocalRank {
        /// The local rank.
        local_rank: u32,
        /// Devices on the node.
        count: usize,
    },
}

/// Chooses the devices a rank samples: `configured` (the `gpu_devices` key:
/// `all`, or NVML indices, UUIDs and PCI bus ids), else `cuda_visible`
/// (CUDA_VISIBLE_DEVICES) and the local rank, else the local rank's device.
pub fn select(
    devices: &[DeviceId],
    configured: Option<&str>,
    cuda_visible: Option<&str>,
    local_rank: u32,
) -> Result<Selection, SelectError> {
    let mut by_bus: Vec<&DeviceId> = devices.iter().collect();
    by_bus.sort_by_key(|d| d.pci_bus_id.to_ascii_lowercase());
    if let Some(list) = configured.map(str::trim) {
        return configured_devices(devices, list);
    }
    if let Some(list) = cuda_visible.map(str::trim) {
        return visible_device(devices, &by_bus, list, local_rank);
    }
    let chosen = by_bus
        .get(local_rank as usize)
        .ok_or(SelectError::NoDeviceForLocalRank {
            local_rank,
            count: devices.len(),
        })?;
    Ok(Selection {
        indices: vec![chosen.index],
        how: format!("LOCAL_RANK={local_rank} (CUDA_VISIBLE_DEVICES unset), PCI bus order"),
    })
}

/// The devices `gpu_devices` names: `all`, or NVML indices, UUIDs and PCI
/// bus ids.
fn configured_devices(devices: &[DeviceId], list: &str) -> Result<Selection, SelectError> {
    if list.eq_ignore_ascii_case("all") {
        return Ok(Selection {
            indices: devices.iter().map(|d| d.index).collect(),
            how: "gpu_devices=all".into(),
        });
    }
    let named = resolve(devices, list, "gpu_devices", |n| {
        devices.iter().find(|d| d.index as usize == n)
    })?;
    Ok(Selection {
        indices: named.iter().map(|d| d.index).collect(),
        how: format!("gpu_devices={list}"),
    })
}

/// The device of this local rank among those CUDA_VISIBLE_DEVICES shows
/// (ordinals count in PCI bus order, as CUDA's do); none where it hides
/// every GPU.
fn visible_device(
    devices: &[DeviceId],
    by_bus: &[&DeviceId],
    list: &str,
    local_rank: u32,
) -> Result<Selection, SelectError> {
    let visible = match list == "-1" {
        true => Vec::new(),
        false => resolve(devices, list, "CUDA_VISIBLE_DEVICES", |n| {
            by_bus.get(n).copied()
        })?,
    };
    let how = match visible.len() {
        0 => {
            return Ok(Selection {
                indices: Vec::new(),
                how: format!("CUDA_VISIBLE_DEVICES={list:?} hides every GPU"),
            })
        }
        1 => format!("CUDA_VISIBLE_DEVICES={list}"),
        _ => format!("CUDA_VISIBLE_DEVICES={list}, LOCAL_RANK={local_rank}"),
    };
    let chosen = visible[local_rank as usize % visible.len()];
    Ok(Selection {
        indices: vec![chosen.index],
        how,
    })
}

/// The devices the entries of `list` (the setting `origin`) name: a number
/// by `numbered`, else a UUID or PCI bus id.
fn resolve<'d>(
    devices: &'d [DeviceId],
    list: &str,
    origin: &'static str,
    numbered: impl Fn(usize) -> Option<&'d DeviceId>,
) -> Result<Vec<&'d DeviceId>, SelectError> {
    entries(list)
        .map(|entry| {
            let found = match entry.parse::<usize>() {
                Ok(n) => numbered(n),
                Err(_) => by_name(devices, entry, origin)?,
            };
            found.ok_or_else(|| SelectError::NoMatch {
                origin,
                entry: entry.to_string(),
                known: known(devices),
            })
        })
        .collect()
}

/// Every device, for an error that names what there is.
fn known(devices: &[DeviceId]) -> String {
    devices
        .iter()
        .map(|d| format!("{} {} {}", d.index, d.uuid, d.pci_bus_id))
        .collect::<Vec<_>>()
        .join("; ")
}

fn entries(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// The device a UUID (or unique UUID prefix, as CUDA accepts) or PCI bus id names.
fn by_name<'d>(
    devices: &'d [DeviceId],
    entry: &str,
    origin: &'static str,
) -> Result<Option<&'d DeviceId>, SelectError> {
    if entry.starts_with("MIG-") {
        return Err(SelectError::Mig {
            origin,
            entry: entry.to_string(),
        });
    }
    let wanted = entry.to_ascii_lowercase();
    let bus = |d: &DeviceId| normalize_bus_id(&d.pci_bus_id) == normalize_bus_id(&wanted);
    if let Some(device) = devices.iter().find(|d| bus(d)) {
        return Ok(Some(device));
    }
    let mut matches = devices
        .iter()
        .filter(|d| d.uuid.to_ascii_lowercase().starts_with(&wanted));
    Ok(match (matches.next(), matches.next()) {
        (Some(device), None) => Some(device),
        _ => None,
    })
}

/// `0000:3b:00.0` and `00000000:3B:00.0` name the same device.
fn normalize_bus_id(id: &str) -> String {
    let id = id.to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.chars().all(|c| c.is_ascii_hexdigit()) => {
            format!("{:0>8}:{rest}", domain.trim_start_matches('0'))
        }
        _ => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four devices whose NVML order is the reverse of their PCI bus order.
    fn devices() -> Vec<DeviceId> {
        (0..4)
            .map(|i| DeviceId {
                index: i,
                uuid: format!("GPU-aaaa000{i}-0000-0000-0000-00000000000{i}"),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x40 - 0x10 * i),
            })
            .collect()
    }

    #[test]
    fn unset_uses_the_local_rank_in_pci_bus_order() {
        let s = select(&devices(), None, None, 0).unwrap();
        assert_eq!(s.indices, vec![3], "lowest bus id is NVML index 3 here");
        assert!(s.how.contains("LOCAL_RANK=0"));
        let err = select(&devices(), None, None, 4).unwrap_err();
        assert!(matches!(
            err,
            SelectError::NoDeviceForLocalRank {
                local_rank: 4,
                count: 4
            }
        ));
    }

    #[test]
    fn visible_indices_are_cuda_ordinals_in_bus_order() {
        // The launcher gave this rank CUDA device 1 only.
        let s = select(&devices(), None, Some("1"), 3).unwrap();
        assert_eq!(s.indices, vec![2]);
        // All four visible: LOCAL_RANK picks among them.
        let s = select(&devices(), None, Some("0,1,2,3"), 1).unwrap();
        assert_eq!(s.indices, vec![2]);
        assert!(s.how.contains("LOCAL_RANK=1"));
    }

    #[test]
    fn visible_uuids_and_prefixes_match_exactly_that_device() {
        let s = select(
            &devices(),
            None,
            Some("GPU-aaaa0002-0000-0000-0000-000000000002"),
            0,
        )
        .unwrap();
        assert_eq!(s.indices, vec![2]);
        let s = select(&devices(), None, Some("GPU-aaaa0001"), 0).unwrap();
        assert_eq!(s.indices, vec![1]);
        // An ambiguous prefix matches nothing, as in CUDA.
        assert!(select(&devices(), None, Some("GPU-aaaa"), 0).is_err());
    }

    #[test]
    fn a_uuid_that_matches_nothing_is_a_clear_error() {
        let err = select(&devices(), None, Some("GPU-ffff"), 0).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("CUDA_VISIBLE_DEVICES entry `GPU-ffff` matches no GPU"),
            "{text}"
        );
        assert!(
            text.contains("GPU-aaaa0000"),
            "lists the devices there are: {text}"
        );
        let err = select(&devices(), None, Some("7"), 0).unwrap_err();
        assert!(matches!(err, SelectError::NoMatch { .. }));
        let err = select(&devices(), None, Some("MIG-1234"), 0).unwrap_err();
        assert!(matches!(err, SelectError::Mig { .. }));
    }

    #[test]
    fn hidden_gpus_select_nothing() {
        // A list of separators only hides every GPU too (it divided by
        // zero before).
        for hidden in ["", "-1", ",", " , ,"] {
            let s = select(&devices(), None, Some(hidden), 0).unwrap();
            assert!(s.indices.is_empty());
        }
    }

    #[test]
    fn configuration_wins_and_takes_indices_uuids_bus_ids_or_all() {
        let s = select(&devices(), Some("all"), Some("0"), 0).unwrap();
        assert_eq!(s.indices, vec![0, 1, 2, 3]);
        let s = select(&devices(), Some("1, 0000:10:00.0"), None, 0).unwrap();
        assert_eq!(
            s.indices,
            vec![1, 3],
            "NVML index 1, then the device on bus 0x10"
        );
        let err = select(&devices(), Some("GPU-nope"), None, 0).unwrap_err();
        assert!(err.to_string().contains("gpu_devices entry `GPU-nope`"));
    }
}
