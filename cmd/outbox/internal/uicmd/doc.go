// Package uicmd is outbox ui: it opens an outbox and serves its dashboard
// (package ui) until SIGTERM or SIGINT. The hosting it shares with the
// relay's --ui-addr and the demo's --ui is in package cli.
package uicmd
