package main

import (
	"context"
	"errors"
)

const schemaOurs = "bench_outbox"

type target struct{ name string }

func (s *Suite) postgresTarget() target { return target{"postgres"} }
func (s *Suite) redisTarget() target    { return target{"redis"} }
func (s *Suite) ours(ctx context.Context, t target) error {
	return errors.New("backend " + t.name + " not wired yet")
}
