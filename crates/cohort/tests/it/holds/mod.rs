//! Legal holds (contract H) and host deletions that respect them (DL).

mod canonical;
mod guards;
mod matters;
mod races;
mod repository;
mod requests;
