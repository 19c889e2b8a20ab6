package relaycmd

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// NATSFlags are the relay's flags for NATS JetStream (--sink-url nats://
// or tls://), mapped onto natssink.Options and nats.go's options.
type NATSFlags struct {
	NATSUser           string            `name:"nats-user" env:"OUTBOX_NATS_USER" placeholder:"USER" group:"NATS" help:"User name, with --nats-password (instead of nats://USER:PASSWORD@HOST in the URL)."`
	NATSPassword       string            `name:"nats-password" env:"OUTBOX_NATS_PASSWORD" placeholder:"PASSWORD" group:"NATS" help:"Password of --nats-user; prefer the environment variable, as other users of the host can read command lines. Never printed."`
	NATSToken          string            `name:"nats-token" env:"OUTBOX_NATS_TOKEN" placeholder:"TOKEN" group:"NATS" help:"Authentication token (instead of nats://TOKEN@HOST in the URL: a user without a password in a NATS URL is a token); prefer the environment variable. Never printed."`
	NATSCreds          string            `name:"nats-creds" placeholder:"FILE" group:"NATS" help:"Chained credentials file (a user JWT and its NKEY seed, as nsc writes it) for decentralized authentication."`
	NATSNKey           string            `name:"nats-nkey" placeholder:"FILE" group:"NATS" help:"File holding a user NKEY seed (SU...) to sign the server's challenge with."`
	NATSTLSCA          string            `name:"nats-tls-ca" placeholder:"FILE" group:"NATS" help:"PEM file of the CA certificates to verify the servers with, instead of the system's roots; implies TLS."`
	NATSTLSCert        string            `name:"nats-tls-cert" placeholder:"FILE" group:"NATS" help:"PEM client certificate for mutual TLS (with --nats-tls-key); implies TLS."`
	NATSTLSKey         string            `name:"nats-tls-key" placeholder:"FILE" group:"NATS" help:"PEM private key of --nats-tls-cert."`
	NATSSubjectPrefix  string            `name:"nats-subject-prefix" placeholder:"PREFIX" group:"NATS" help:"Prefix added to an entry's topic to make its subject (entries the map names excepted), such as 'outbox.'."`
	NATSSubjectMap     map[string]string `name:"nats-subject-map" mapsep:"," placeholder:"TOPIC=SUBJECT,..." group:"NATS" help:"Subject of the entries of these topics, comma-separated; the prefix is not added to them."`
	NATSPublishTimeout time.Duration     `name:"nats-publish-timeout" default:"5s" placeholder:"DURATION" group:"NATS" help:"Bound on one publish round; messages not acknowledged by the stream by then are retried later (the stream's duplicate window drops a second copy). It is part of the sink's landing bound, and --lease-ttl must exceed 1.5 times that bound. /readyz reports not ready once every publish has failed for twice this. Default: ${default}."`
	NATSMaxPending     int               `name:"nats-max-pending" default:"0" placeholder:"N" group:"NATS" help:"Most publishes awaiting the stream's acknowledgement at once (0: the sink's default)."`
}

// natsSchemes are the URL schemes of a NATS --sink-url.
var natsSchemes = []string{"nats", "tls"}

// natsProblems checks the NATS flags and the nats:// URL: one
// authentication, files in pairs, a well-formed mapping.
func (c *RelayCmd) natsProblems() []string {
	errs, authInURL := natsURLProblems(c.SinkURL)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	methods := authInURL
	if c.NATSUser != "" || c.NATSPassword != "" {
		methods = append(methods, "--nats-user and --nats-password")
		if c.NATSUser == "" || c.NATSPassword == "" {
			bad("--nats-user and --nats-password (or OUTBOX_NATS_PASSWORD) go together")
		}
	}
	for _, m := range []struct{ flag, value string }{{"--nats-token", c.NATSToken}, {"--nats-creds", c.NATSCreds}, {"--nats-nkey", c.NATSNKey}} {
		if m.value != "" {
			methods = append(methods, m.flag)
		}
	}
	if len(methods) > 1 {
		bad("NATS authentication is given more than one way (%s): give one", strings.Join(methods, ", "))
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		bad("--nats-tls-cert and --nats-tls-key go together")
	}
	for from, to := range c.NATSSubjectMap {
		if from == "" || to == "" || strings.ContainsAny(to, " \t*>") {
			bad("--nats-subject-map: %q=%q: write TOPIC=SUBJECT with neither side empty and no wildcard or space in the subject", from, to)
		}
	}
	if strings.ContainsAny(c.NATSSubjectPrefix, " \t*>") {
		bad("--nats-subject-prefix %q: a subject has no wildcard (*, >) or space", c.NATSSubjectPrefix)
	}
	if c.NATSPublishTimeout <= 0 {
		bad("--nats-publish-timeout must be positive (it is %v)", c.NATSPublishTimeout)
	}
	if c.NATSMaxPending < 0 {
		bad("--nats-max-pending must be 0 (the sink's default) or positive (it is %d)", c.NATSMaxPending)
	}
	return errs
}

// natsURLProblems checks a NATS --sink-url (comma-separated nats:// or
// tls:// URLs without path or query); auth names the authentication the
// URLs carry: a user and password, or a token (a lone user info, as
// nats.go takes it).
func natsURLProblems(list string) (errs, auth []string) {
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	passInURL, tokenInURL := false, false
	for _, raw := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		switch {
		case err != nil:
			bad("--sink-url: %s", cli.RedactText(err.Error(), cli.URLSecrets(raw)...))
			continue
		case !isOneOf(u.Scheme, natsSchemes):
			bad("--sink-url: %q: a NATS URL list has nats:// or tls:// URLs only", u.Redacted())
		case u.Host == "":
			bad("--sink-url: %s has no host: write nats://HOST:4222", redactNATS(u))
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "":
			bad("--sink-url: %s: a NATS URL has no path or query: write nats://[USER:PASSWORD@]HOST:PORT", redactNATS(u))
		}
		if u.User != nil {
			_, hasPass := u.User.Password()
			passInURL = passInURL || hasPass
			tokenInURL = tokenInURL || !hasPass
		}
	}
	if passInURL {
		auth = append(auth, "a user and password in --sink-url")
	}
	if tokenInURL {
		auth = append(auth, "a token in --sink-url (nats://TOKEN@HOST)")
	}
	return errs, auth
}

// isOneOf reports whether s is one of list, ignoring case.
func isOneOf(s string, list []string) bool {
	for _, l := range list {
		if strings.EqualFold(s, l) {
			return true
		}
	}
	return false
}

// redactNATS is u without its password or token (a NATS URL's lone user
// info is a token).
func redactNATS(u *url.URL) string {
	r := *u
	if r.User != nil {
		if _, ok := r.User.Password(); ok {
			return r.Redacted()
		}
		r.User = url.User("xxxxx")
	}
	return r.String()
}

// natsURLs is --sink-url with every password and token removed, for the
// start log line.
func (c *RelayCmd) natsURLs() string {
	var out []string
	for _, raw := range strings.Split(c.SinkURL, ",") {
		if u, err := url.Parse(strings.TrimSpace(raw)); err == nil {
			out = append(out, redactNATS(u))
		}
	}
	return strings.Join(out, ",")
}

// natsOptions are the nats.go options from the flags: authentication and
// TLS. The URL's own user and password or token are nats.go's to use.
func (c *RelayCmd) natsOptions() []nats.Option {
	var opts []nats.Option
	switch {
	case c.NATSPassword != "":
		opts = append(opts, nats.UserInfo(c.NATSUser, c.NATSPassword))
	case c.NATSToken != "":
		opts = append(opts, nats.Token(c.NATSToken))
	case c.NATSCreds != "":
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	case c.NATSNKey != "":
		if o, err := nats.NkeyOptionFromSeed(c.NATSNKey); err == nil {
			opts = append(opts, o)
		} else {
			opts = append(opts, func(*nats.Options) error {
				return fmt.Errorf("--nats-nkey %s: %w", c.NATSNKey, err)
			})
		}
	}
	if c.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSTLSCA))
	}
	if c.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSTLSCert, c.NATSTLSKey))
	}
	return opts
}

// natsAuth names the NATS authentication in use, for the start log line.
func (c *RelayCmd) natsAuth() string {
	switch {
	case c.NATSCreds != "":
		return "creds"
	case c.NATSNKey != "":
		return "nkey"
	case c.NATSPassword != "" || c.NATSUser != "":
		return "user"
	case c.NATSToken != "":
		return "token"
	}
	for _, raw := range strings.Split(c.SinkURL, ",") {
		if u, err := url.Parse(strings.TrimSpace(raw)); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				return "user"
			}
			return "token"
		}
	}
	return "none"
}

// natsOptionFlags names the flags of natssink's options, for the sink's
// messages (errors, parked reasons); the others keep their Go names.
var natsOptionFlags = map[string]string{
	"Subject":        "--nats-subject-prefix or --nats-subject-map",
	"PublishTimeout": "--nats-publish-timeout",
	"MaxPending":     "--nats-max-pending",
}

// NATSOptions maps the subject and publishing flags onto the NATS sink's
// options.
func (c *RelayCmd) NATSOptions() natssink.Options {
	o := natssink.Options{
		PublishTimeout: c.NATSPublishTimeout,
		MaxPending:     c.NATSMaxPending,
		OptionName:     func(o string) string { return natsOptionFlags[o] },
	}
	o.Subject = topicMapping(c.NATSSubjectPrefix, c.NATSSubjectMap)
	return o
}

// topicMapping maps an entry's topic through mapped, else adds prefix;
// nil (the sink's default: the topic) when neither is set.
func topicMapping(prefix string, mapped map[string]string) func(outbox.Entry) string {
	if prefix == "" && len(mapped) == 0 {
		return nil
	}
	return func(e outbox.Entry) string {
		if t, ok := mapped[e.Topic]; ok {
			return t
		}
		return prefix + e.Topic
	}
}

// natsSink connects the NATS sink (natssink.Dial connects at once).
func (c *RelayCmd) natsSink() (*relaySink, error) {
	sink, err := natssink.Dial(c.SinkURL, c.NATSOptions(), c.natsOptions()...)
	if err != nil {
		return nil, fmt.Errorf("relay: %w (check --sink-url and the --nats-* authentication flags)", err)
	}
	return &relaySink{
		Sink: sink, name: "NATS", timeoutFlag: "--nats-publish-timeout", timeout: c.NATSPublishTimeout,
		failing: sink.Failing, probe: sink.Ping, close: sink.Close,
		attrs: []any{"nats_url", c.natsURLs(), "nats_auth", c.natsAuth(),
			"nats_tls", strings.HasPrefix(strings.ToLower(c.SinkURL), "tls://") || c.NATSTLSCA != "" || c.NATSTLSCert != ""},
	}, nil
}
