// Package movecmd is outbox move: the command-line front end of package
// move, which moves a live outbox to another store, backend or partition
// count (--prepare, the move itself, --dry-run, --verify, --release,
// --unseal).
package movecmd
