package relaycmd

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newPrometheus returns a MeterProvider whose instruments the handler
// serves in the Prometheus text format (through the OpenTelemetry
// Prometheus exporter), with the Go runtime and process collectors. Each
// call has its own registry. The relay command and the test that checks
// the dashboards and alert rules against the exported names both use it,
// so the names are the same.
func newPrometheus() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("setting up the Prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	return mp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
