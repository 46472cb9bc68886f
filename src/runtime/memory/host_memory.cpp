// host_memory (see host_memory.h).
#include "runtime/memory/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace hyla::runtime {

Result<HostMemory> parse_meminfo(const std::string& text) {
  HostMemory memory;
  memory.source = "/proc/meminfo";
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    long long kib = -1;
    fields >> key >> kib >> unit;
    if (kib < 0 || unit != "kB") continue;
    if (key == "MemAvailable:") memory.available_bytes = int64_t(kib) * 1024;
    if (key == "MemTotal:") memory.total_bytes = int64_t(kib) * 1024;
  }
  if (memory.available_bytes <= 0 || memory.total_bytes <= 0)
    return Status(ErrorCode::kNotFound, "/proc/meminfo: no MemAvailable and MemTotal lines in kB");
  return memory;
}

Result<HostMemory> host_memory() {
  std::ifstream file("/proc/meminfo");
  if (file) {
    std::ostringstream text;
    text << file.rdbuf();
    Result<HostMemory> memory = parse_meminfo(text.str());
    if (memory.ok()) return memory;
  }
  const long page = sysconf(_SC_PAGESIZE), available = sysconf(_SC_AVPHYS_PAGES),
             total = sysconf(_SC_PHYS_PAGES);
  if (page <= 0 || available <= 0 || total <= 0)
    return Status(ErrorCode::kNotFound,
                  "host memory: neither /proc/meminfo nor sysconf reports the memory size");
  return HostMemory{int64_t(available) * page, int64_t(total) * page, "sysconf"};
}

}  // namespace hyla::runtime
