-- Sealed: whether the seal trigger exists. $1 the outbox table's
-- qualified name, $2 the trigger's name.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2)
