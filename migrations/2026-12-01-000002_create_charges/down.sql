DROP TABLE charges;
