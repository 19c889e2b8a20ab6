//go:build !mysqlours

package main

import (
	"context"
	"time"
)

// Until the MySQL backend has its core (AppendInTx, leases): no rows of ours.

type mysqlStep struct {
	name string
	fn   func(ctx context.Context) error
}

func (s *Suite) mysqlOurs(c *mysqlConn) []mysqlStep { return nil }

func pollIntervals() []time.Duration { return []time.Duration{100 * time.Millisecond} }

func ivName(iv time.Duration) string { return iv.String() }

func idleKey(iv time.Duration) string { return "ours.my.idle." + ivName(iv) }

const latRate = 50
