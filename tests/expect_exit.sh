#!/bin/sh
# Runs a command for a CTest case that matches its output with PASS_REGULAR_EXPRESSION (CTest then
# ignores the exit code) and checks the exit code too:
#   expect_exit.sh CODE COMMAND [ARG...]
# The command's output passes through. When its exit code is not CODE this prints
#   expect_exit.sh: FAILED: '<command>' exited with <code>, expected CODE
# which the case's FAIL_REGULAR_EXPRESSION ("expect_exit.sh: FAILED") turns into a failure whatever
# the regex matched (tests/CMakeLists.txt: hyla_output_test), and exits with that code (so a
# SKIP_RETURN_CODE still skips), or 1 when the command exited 0 against a non-zero CODE.
if [ $# -lt 2 ]; then
  echo "expect_exit.sh: FAILED: usage: expect_exit.sh CODE COMMAND [ARG...]"
  exit 2
fi
expected=$1
shift
"$@"
code=$?
[ "$code" -eq "$expected" ] && exit 0
echo "expect_exit.sh: FAILED: '$1' exited with $code, expected $expected"
[ "$code" -ne 0 ] && exit "$code"
exit 1
