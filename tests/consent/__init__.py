"""The consent card: argument schemas, fields, forms, review, gate text and URL answers."""
