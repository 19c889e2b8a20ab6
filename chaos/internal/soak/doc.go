// Package soak holds the pieces of the chaos harness's soak run (`chaos
// soak`, scripts/soak.sh) that need no process: the samples a run takes
// every 10 seconds and their CSV file, the least-squares trend check of
// the resource series, the latency windows and their p99 check, and the
// PNG charts (gonum.org/v1/plot).
package soak
