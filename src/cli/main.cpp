// The `hyla` command: help and version for now.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version"))) {
    std::printf("hyla %s\n", HYLA_VERSION);
    return 0;
  }
  std::printf("usage: hyla [--version]\n");
  return 0;
}
