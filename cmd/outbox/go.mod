module github.com/outboxrelay/outbox/cmd/outbox

go 1.26.8

replace (
	github.com/outboxrelay/outbox => ../..
	github.com/outboxrelay/outbox/backends/postgres => ../../backends/postgres
	github.com/outboxrelay/outbox/backends/redis => ../../backends/redis
	github.com/outboxrelay/outbox/chaos => ../../chaos
	github.com/outboxrelay/outbox/internal/cmd/kfakebroker => ../../internal/cmd/kfakebroker
	github.com/outboxrelay/outbox/internal/ops => ../../internal/ops
	github.com/outboxrelay/outbox/internal/testenv/containers => ../../internal/testenv/containers
	github.com/outboxrelay/outbox/move => ../../move
	github.com/outboxrelay/outbox/sinks/amqp => ../../sinks/amqp
	github.com/outboxrelay/outbox/sinks/kafka => ../../sinks/kafka
	github.com/outboxrelay/outbox/sinks/nats => ../../sinks/nats
	github.com/outboxrelay/outbox/ui => ../../ui
)

require (
	github.com/alecthomas/kong v1.17.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/jwt/v2 v2.8.3
	github.com/nats-io/nats-server/v2 v2.15.3
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nkeys v0.4.17
	github.com/outboxrelay/outbox v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/postgres v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/backends/redis v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/internal/ops v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/move v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/amqp v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/kafka v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/sinks/nats v0.0.0-00010101000000-000000000000
	github.com/outboxrelay/outbox/ui v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.25.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/vbauerster/mpb/v8 v8.16.2
	go.opentelemetry.io/otel/exporters/prometheus v0.69.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.yaml.in/yaml/v3 v3.0.5
	golang.org/x/term v0.48.0
)

require filippo.io/edwards25519 v1.2.0 // indirect

require (
	github.com/VividCortex/ewma v1.2.0 // indirect
	github.com/acarl005/stripansi v0.0.0-20180116102854-5a71ef0e047d // indirect
	github.com/antithesishq/antithesis-sdk-go v0.9.0-default-no-op // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/clipperhouse/uax29/v2 v2.7.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-sql-driver/mysql v1.10.1
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/mattn/go-runewidth v0.0.30 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/outboxrelay/outbox/backends/mysql v0.0.0-00010101000000-000000000000
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/otlptranslator v1.0.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	github.com/vbauerster/cupwriter v0.0.5 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/outboxrelay/outbox/backends/mysql => ../../backends/mysql
