drop schema if exists pgflow cascade;
