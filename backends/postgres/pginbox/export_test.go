package pginbox

// PurgeSQL is the rendered Purge statement of opts, for the plan test.
func PurgeSQL(opts Options) string {
	o, err := opts.withDefaults()
	if err != nil {
		panic(err)
	}
	return newQueries(o).purge
}
