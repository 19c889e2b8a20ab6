module github.com/outboxrelay/outbox/bench

go 1.26.8

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-sql/v4 v4.1.2
	github.com/go-sql-driver/mysql v1.10.1
	github.com/hibiken/asynq v0.26.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/outboxrelay/outbox v0.0.0
	github.com/outboxrelay/outbox/backends/postgres v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/redis v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/move v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/kafka v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/riverqueue/river v0.51.1
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.51.1
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require filippo.io/edwards25519 v1.2.0 // indirect

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/lib/pq v1.10.9 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/outboxrelay/outbox/backends/mysql v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/amqp v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/nats v0.0.0-00010101000000-000000000000
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/riverqueue/river/riverdriver v0.51.1 // indirect
	github.com/riverqueue/river/rivershared v0.51.1 // indirect
	github.com/riverqueue/river/rivertype v0.51.1 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	github.com/spf13/cast v1.10.0 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/outboxrelay/outbox => ../
	github.com/outboxrelay/outbox/backends/postgres => ../backends/postgres
	github.com/outboxrelay/outbox/backends/redis => ../backends/redis
	github.com/outboxrelay/outbox/chaos => ../chaos
	github.com/outboxrelay/outbox/cmd/outbox => ../cmd/outbox
	github.com/outboxrelay/outbox/internal/cmd/kfakebroker => ../internal/cmd/kfakebroker
	github.com/outboxrelay/outbox/internal/ops => ../internal/ops
	github.com/outboxrelay/outbox/internal/testenv/containers => ../internal/testenv/containers
	github.com/outboxrelay/outbox/move => ../move
	github.com/outboxrelay/outbox/sinks/amqp => ../sinks/amqp
	github.com/outboxrelay/outbox/sinks/kafka => ../sinks/kafka
	github.com/outboxrelay/outbox/sinks/nats => ../sinks/nats
	github.com/outboxrelay/outbox/ui => ../ui
)

replace github.com/outboxrelay/outbox/backends/mysql => ../backends/mysql
