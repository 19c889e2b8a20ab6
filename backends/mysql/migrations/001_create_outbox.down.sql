-- mysqloutbox migration 001, down: drops every table of the outbox, with
-- its entries.
DROP TABLE IF EXISTS `outbox_pause_part`;
DROP TABLE IF EXISTS `outbox_pause_topic`;
DROP TABLE IF EXISTS `outbox_keyseq`;
DROP TABLE IF EXISTS `outbox_member`;
DROP TABLE IF EXISTS `outbox_import`;
DROP TABLE IF EXISTS `outbox_hold`;
DROP TABLE IF EXISTS `outbox_meta`;
DROP TABLE IF EXISTS `outbox_archive`;
DROP TABLE IF EXISTS `outbox_lease`;
DROP TABLE IF EXISTS `outbox`;
