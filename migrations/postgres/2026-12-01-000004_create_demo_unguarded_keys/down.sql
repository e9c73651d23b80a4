DROP TABLE demo_unguarded_keys;
