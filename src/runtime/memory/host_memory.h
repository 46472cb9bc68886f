// The host's memory as the kernel reports it (/proc/meminfo, else sysconf): what the engine may
// allocate for its pools, checked before it allocates them.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace hyla::runtime {

struct HostMemory {
  int64_t available_bytes = 0;  ///< MemAvailable: what can be allocated without swapping
  int64_t total_bytes = 0;      ///< MemTotal
  std::string source;           ///< "/proc/meminfo" or "sysconf"
};

/// /proc/meminfo's MemAvailable and MemTotal; sysconf(_SC_AVPHYS_PAGES / _SC_PHYS_PAGES) where
/// that file is missing. Error: neither gives a number.
Result<HostMemory> host_memory();

/// Parses /proc/meminfo text ("MemTotal:  16310412 kB" lines). Error: a field missing.
Result<HostMemory> parse_meminfo(const std::string& text);

}  // namespace hyla::runtime
