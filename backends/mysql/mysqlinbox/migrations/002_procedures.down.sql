-- mysqlinbox migration 002, down: drops the procedures (the Store then
-- sends their statements one by one).
DROP PROCEDURE IF EXISTS `inbox_finish`;
DROP PROCEDURE IF EXISTS `inbox_record_keys`;
