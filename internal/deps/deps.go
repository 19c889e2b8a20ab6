//go:build tools

// Package deps pins the modules the backends, sinks and tests import while
// they are written in parallel, so go.mod does not churn. Removed once every
// module is imported for real.
package deps

import (
	_ "github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/stretchr/testify/require"
	_ "github.com/twmb/franz-go/pkg/kerr"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "go.opentelemetry.io/otel/trace"
)
