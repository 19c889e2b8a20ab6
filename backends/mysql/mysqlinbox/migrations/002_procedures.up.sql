-- mysqlinbox migration 002: two stored procedures that let the inbox do
-- in one round trip what takes two statements (MySQL sends one statement
-- per round trip unless the DSN sets multiStatements, and an INSERT
-- returns no rows): Store.RecordWithKeySeqs (Record, then KeySeqs) and
-- Store.Finish (SetKeySeqs, then SaveOffsets). Without them (this
-- migration not applied) the Store sends the statements one by one.
--
-- SQL SECURITY INVOKER: a procedure runs with the caller's privileges on
-- the tables, not the migrator's; callers need EXECUTE on them.
--
-- Each procedure is one statement between the markers below (its body
-- holds semicolons): Migrate sends it whole. A tool that sends the file
-- as one multi-statement string (golang-migrate with multiStatements=true)
-- needs nothing else; the mysql command-line client needs a DELIMITER.
-- DROP ... IF EXISTS first, so that a run stopped half-way can run again
-- (MySQL before 8.0.29 has no CREATE PROCEDURE IF NOT EXISTS).

DROP PROCEDURE IF EXISTS `inbox_record_keys`;

-- inbox_record_keys(token, ids, keys): ids as in queries/record.sql,
-- keys as in queries/key_seqs_lock.sql ([hash, key] pairs, sorted by
-- hash). Returns two result sets: the IDs this call inserted (its
-- token's rows), and the keys' rows (hash, seq; seq NULL for a key
-- without a number), locked for the transaction. The keys are locked
-- first (existing rows), then given lock rows (new keys), then read with
-- a locking read, which waits for a concurrent transaction that inserted
-- one of them meanwhile.
-- +goose StatementBegin
CREATE PROCEDURE `inbox_record_keys`(IN p_tok BIGINT, IN p_ids LONGTEXT, IN p_keys LONGTEXT)
    SQL SECURITY INVOKER
    MODIFIES SQL DATA
BEGIN
    DECLARE locked BIGINT DEFAULT 0;
    INSERT IGNORE INTO `inbox` (id, applied_at, tok)
    SELECT UNHEX(j.h), UTC_TIMESTAMP(6), p_tok
    FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(510) PATH '$')) AS j
    ORDER BY j.n;
    SELECT r.id
    FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (h VARCHAR(510) PATH '$')) AS j
    STRAIGHT_JOIN `inbox` AS r FORCE INDEX (PRIMARY) ON r.id = UNHEX(j.h)
    WHERE r.tok = p_tok;
    SELECT COUNT(*) INTO locked
    FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (h VARCHAR(64) PATH '$[0]')) AS j
    STRAIGHT_JOIN `inbox_keyseq` AS r FORCE INDEX (PRIMARY) ON r.key_hash = UNHEX(j.h)
    FOR UPDATE;
    IF locked < JSON_LENGTH(p_keys) THEN
        INSERT IGNORE INTO `inbox_keyseq` (key_hash, k, seq, updated_at)
        SELECT UNHEX(j.h), UNHEX(j.k), NULL, UTC_TIMESTAMP(6)
        FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(64) PATH '$[0]', k VARCHAR(8192) PATH '$[1]')) AS j
        ORDER BY j.n;
    END IF;
    SELECT r.key_hash, r.seq
    FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(64) PATH '$[0]')) AS j
    STRAIGHT_JOIN `inbox_keyseq` AS r FORCE INDEX (PRIMARY) ON r.key_hash = UNHEX(j.h)
    ORDER BY j.n
    FOR UPDATE;
END;
-- +goose StatementEnd

DROP PROCEDURE IF EXISTS `inbox_finish`;

-- inbox_finish(seqs, offsets): seqs as in queries/set_key_seqs.sql,
-- offsets as in queries/save_offsets.sql; either may be '[]'.
-- +goose StatementBegin
CREATE PROCEDURE `inbox_finish`(IN p_seqs LONGTEXT, IN p_offsets LONGTEXT)
    SQL SECURITY INVOKER
    MODIFIES SQL DATA
BEGIN
    IF JSON_LENGTH(p_seqs) > 0 THEN
        INSERT INTO `inbox_keyseq` (key_hash, k, seq, updated_at)
        SELECT UNHEX(j.h), UNHEX(j.k), j.s, UTC_TIMESTAMP(6)
        FROM JSON_TABLE(p_seqs, '$[*]' COLUMNS (n FOR ORDINALITY, h VARCHAR(64) PATH '$[0]', k VARCHAR(8192) PATH '$[1]', s BIGINT PATH '$[2]')) AS j
        ORDER BY j.n
        ON DUPLICATE KEY UPDATE seq = VALUES(seq), updated_at = VALUES(updated_at);
    END IF;
    IF JSON_LENGTH(p_offsets) > 0 THEN
        INSERT INTO `inbox_offsets` (grp, topic, part, `next`)
        SELECT UNHEX(j.g), UNHEX(j.t), j.p, j.x
        FROM JSON_TABLE(p_offsets, '$[*]' COLUMNS (n FOR ORDINALITY, g VARCHAR(510) PATH '$[0]', t VARCHAR(510) PATH '$[1]', p INT PATH '$[2]', x BIGINT PATH '$[3]')) AS j
        ORDER BY j.n
        ON DUPLICATE KEY UPDATE `next` = VALUES(`next`);
    END IF;
END;
-- +goose StatementEnd
