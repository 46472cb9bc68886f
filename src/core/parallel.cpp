// Thread count control for parallel_for (OpenMP).
#include "core/parallel.h"

#include <omp.h>

namespace hyla {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

}  // namespace hyla
