# Shared helpers of the end-to-end shell tests (sourced). Callers define `failures=0` first.

# expect_exit CODE PATTERN COMMAND...: runs COMMAND, checks its exit code and that its combined
# output matches the extended regex PATTERN. The output is kept in $last_output.
expect_exit() {
  local want=$1 pattern=$2
  shift 2
  local code
  last_output=$("$@" 2>&1)
  code=$?
  if [ "$code" -ne "$want" ]; then
    echo "FAIL: '$*' exited $code, expected $want. Output:"; echo "$last_output"
    failures=$((failures + 1)); return
  fi
  if ! grep -Eq -- "$pattern" <<<"$last_output"; then
    echo "FAIL: '$*' output does not match /$pattern/. Output:"; echo "$last_output"
    failures=$((failures + 1)); return
  fi
  echo "ok: $* -> $code"
}

# same_results A_DIR B_DIR: the two output folders hold bitwise the same parameters,
# uncertainties, covariance and chi2 (nlsq/parameters.json).
same_results() {
  if python3 - "$1/nlsq/parameters.json" "$2/nlsq/parameters.json" <<'PY'; then
import json, sys
a, b = (json.load(open(path)) for path in sys.argv[1:])
keys = ["parameters", "per_angle", "covariance", "chi_squared", "reduced_chi_squared",
        "robust_cost"]
diff = [k for k in keys if a.get(k) != b.get(k)]
if diff:
    print("differ in", diff)
    for k in diff:
        print(" ", sys.argv[1], k, json.dumps(a.get(k))[:400])
        print(" ", sys.argv[2], k, json.dumps(b.get(k))[:400])
sys.exit(1 if diff else 0)
PY
    echo "ok: $1 and $2 hold bitwise the same results"
  else
    echo "FAIL: $1 and $2 differ"; failures=$((failures + 1))
  fi
}
