create schema if not exists pgflow;
