//! A description of the machine the figures were measured on.

/// CPU model and count, memory, kernel, and the file system holding `dir`.
pub fn describe(dir: &std::path::Path) -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = field(&cpuinfo, "model name").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = field(&meminfo, "MemTotal")
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .map_or("? GiB".to_owned(), |kib| format!("{:.0} GiB", kib / 1024.0 / 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpus} CPUs ({model}), {memory_gib} RAM, Linux {}, data on {}",
        kernel.trim(),
        file_system(dir).unwrap_or_else(|| "an unknown file system".into())
    )
}

fn field(text: &str, name: &str) -> Option<String> {
    let line = text.lines().find(|line| line.starts_with(name))?;
    Some(line.split_once(':')?.1.trim().to_owned())
}

/// `"ext4 (/dev/vda)"` for the mount that holds `dir`, from `/proc/self/mounts`.
fn file_system(dir: &std::path::Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, mount_point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            dir.starts_with(mount_point).then(|| (mount_point.len(), format!("{kind} ({device})")))
        })
        .max_by_key(|(length, _)| *length)
        .map(|(_, description)| description)
}
