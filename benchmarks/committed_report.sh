#!/usr/bin/env bash
# Sourced by the run scripts. dhash replaces a report directory only where it wrote it, and
# the commit records of the committed reports are not in git, so a re-run first removes the
# committed copy -- but only a directory under benchmarks/results/ whose every file git
# tracks, unmodified (git keeps that copy). Anything else (a user's file in it, local edits,
# an untracked directory) is left alone, and dhash's own ownership rule decides.
remove_committed_report() {
    local dir=$1
    [ -d "$dir" ] || return 0
    case "$(realpath -m -- "$dir")" in
        "$(realpath -m benchmarks/results)"/*) ;;
        *) echo "not removing $dir: outside benchmarks/results" >&2; return 0 ;;
    esac
    if [ -z "$(git ls-files -- "$dir")" ] || [ -n "$(git ls-files --others -- "$dir")" ] \
        || ! git diff --quiet HEAD -- "$dir"; then
        return 0  # not wholly a committed, unmodified report: dhash decides
    fi
    rm -rf -- "$dir"
}
