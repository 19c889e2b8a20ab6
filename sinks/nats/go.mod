module github.com/outboxrelay/outbox/sinks/nats

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
	github.com/nats-io/nats-server/v2 v2.15.3
	github.com/nats-io/nats.go v1.55.0
	github.com/outboxrelay/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/postgres v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
