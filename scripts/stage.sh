# Sourced by .ci/run and scripts/test.sh. `stage CMD...` runs CMD and then prints its wall time:
# the landing run has a time limit, and its log then shows where the time went.
stage() {
    local start=$SECONDS
    "$@"
    echo "== stage: $* ($((SECONDS - start)) s, $SECONDS s in all)" >&2
}
