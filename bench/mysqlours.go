package main

import "context"

// mysqlOurs returns our MySQL workloads.
func (s *Suite) mysqlOurs(c *mysqlConn) []oursWorkload2 { return nil }

type oursWorkload2 struct {
	name string
	fn   func(ctx context.Context) error
}
