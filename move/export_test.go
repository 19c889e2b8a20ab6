package move

// SetAfterImport installs a test hook on opts: called after each Import,
// before RemoveExported; an error stops Run there, as a crash would.
func SetAfterImport(opts *Options, hook func(partition int, ids []string) error) {
	opts.afterImport = hook
}
