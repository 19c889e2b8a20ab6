module github.com/outboxrelay/outbox/sinks/kafka

go 1.26.8

replace (
	github.com/outboxrelay/outbox => ../..
	github.com/outboxrelay/outbox/backends/postgres => ../../backends/postgres
	github.com/outboxrelay/outbox/backends/redis => ../../backends/redis
	github.com/outboxrelay/outbox/chaos => ../../chaos
	github.com/outboxrelay/outbox/cmd/outbox => ../../cmd/outbox
	github.com/outboxrelay/outbox/internal/cmd/kfakebroker => ../../internal/cmd/kfakebroker
	github.com/outboxrelay/outbox/internal/ops => ../../internal/ops
	github.com/outboxrelay/outbox/internal/testenv/containers => ../../internal/testenv/containers
	github.com/outboxrelay/outbox/move => ../../move
	github.com/outboxrelay/outbox/ui => ../../ui
)

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/outboxrelay/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/postgres v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
