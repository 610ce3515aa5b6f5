#!/usr/bin/env bash
# Regenerates the Java-written golden vectors:
#   testdata/golden/datasketches/*.bin, expected.csv
#   testdata/golden/roaring/roaring64_java_portable.{bin,txt}
# Needs Java 17 and Maven; the local Maven repository and the build output go
# under bench/.work/ (gitignored). Estimation-mode KLL images depend on
# DataSketches' random compactions, so regenerating changes their bytes (and
# expected.csv with them); everything else is reproducible byte for byte.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="$root/bench/.work/golden"
mkdir -p "$work"
mvn -q -B -Dmaven.repo.local="$root/bench/.work/m2" -f "$here/pom.xml" package
# datasketches-memory 4.x is built on Java 17's incubating foreign-memory API.
java --add-modules=jdk.incubator.foreign -cp "$work/java-target/golden-gen-0.1.0.jar:$work/java-target/lib/*" \
    cardinal.golden.Generate "$root/testdata/golden/datasketches" "$root/testdata/golden/roaring"
